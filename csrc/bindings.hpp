// The compiled core's components, each bound to the module `auction_gym._core` by its own function
// (defined beside the component, declared here), so module.cpp only lists them.
#pragma once

#include <nanobind/nanobind.h>
