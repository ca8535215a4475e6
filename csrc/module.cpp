// auction_gym._core: the compiled core (docs/design.md section 8).
#include "bindings.hpp"

NB_MODULE(_core, m) {
    m.doc() = "Compiled core of the simulator, bit-identical to the pure-Python reference.";
    // Objects a program keeps in module globals until it exits (a test module's parameters) are
    // freed after this module's teardown, which nanobind would report as leaks; that episodes free
    // theirs by reference counting is tested on both cores (tests/test_market.py).
    nanobind::set_leak_warnings(false);
    bind_radix_cache(m);
    bind_allocator(m);
    bind_market_books(m);
    bind_market_round(m);
    bind_market_pacers(m);
    bind_waiting_prefixes(m);
    bind_engine(m);
    bind_queue_tree(m);
    bind_strict_priority(m);
    bind_lpm_orders(m);
    bind_dfs_weight(m);
    bind_posted_book(m);
    bind_priority_round(m);
    bind_records_summary(m);
    bind_request_slots(m);
}
