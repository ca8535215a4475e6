// auction_gym._core: the compiled core (docs/design.md section 8).
#include "bindings.hpp"

NB_MODULE(_core, m) {
    m.doc() = "Compiled core of the simulator, bit-identical to the pure-Python reference.";
    bind_radix_cache(m);
    bind_allocator(m);
    bind_market_books(m);
    bind_waiting_prefixes(m);
}
