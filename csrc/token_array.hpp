// A read-only numpy int64 array that owns `tokens`: what the compiled core hands Python (a node's
// key, the cached sequences) or builds itself (the engine's made-up replies and resumed sequences),
// which the cache may keep views of as an edge's tokens.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <utility>
#include <vector>

inline nanobind::object array_of(std::vector<int64_t> tokens) {
    namespace nb = nanobind;
    auto *owned = new std::vector<int64_t>(std::move(tokens));
    nb::capsule owner(owned, [](void *p) noexcept { delete static_cast<std::vector<int64_t> *>(p); });
    size_t shape[1] = {owned->size()};
    return nb::cast(nb::ndarray<nb::numpy, const int64_t, nb::ndim<1>>(owned->data(), 1, shape, owner));
}
