// The compiled core's components, each bound to the module `auction_gym._core` by its own function
// (defined beside the component, declared here), so module.cpp only lists them.
#pragma once

#include <nanobind/nanobind.h>

// The radix auction's queue tree kept across rounds (allocator_bindings.cpp).
void bind_allocator(nanobind::module_& m);
