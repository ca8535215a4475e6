// The compiled core's components, each bound to the module `auction_gym._core` by its own function
// (defined beside the component, declared here), so module.cpp only lists them.
#pragma once

#include <nanobind/nanobind.h>

void bind_radix_cache(nanobind::module_ &m);  // radix_cache_bind.cpp
void bind_allocator(nanobind::module_ &m);    // allocator_bindings.cpp
void bind_market_books(nanobind::module_ &m);  // market_books.cpp
void bind_market_round(nanobind::module_ &m);  // market_round.cpp
void bind_market_pacers(nanobind::module_ &m);  // market_pacers.cpp
void bind_waiting_prefixes(nanobind::module_ &m);  // waiting_prefixes_bind.cpp
void bind_engine(nanobind::module_ &m);  // engine_bind.cpp
void bind_queue_tree(nanobind::module_ &m);  // queue_tree.cpp
void bind_strict_priority(nanobind::module_ &m);  // strict_priority.cpp
void bind_lpm_orders(nanobind::module_ &m);  // lpm_orders.cpp
void bind_dfs_weight(nanobind::module_ &m);  // dfs_weight.cpp
void bind_posted_book(nanobind::module_ &m);  // posted_book.cpp
void bind_priority_round(nanobind::module_ &m);  // priority_round.cpp
void bind_records_summary(nanobind::module_ &m);  // records_summary.cpp
void bind_request_slots(nanobind::module_ &m);  // request_slots.cpp
