// auction_gym._workload: the workloads' draws in C++, numpy's draws on the same generator state
// (docs/design.md section 8). Its own module, beside the compiled core: it is built against one
// numpy (NUMPY_VERSION, checked at import by auction_gym/workload/compiled.py) and runs only there.
#define WORKLOAD_IMPORTS_NUMPY
#include "numpy_draws.hpp"

namespace workload {
void bind_agentic(nb::module_ &m);  // agentic.cpp
void bind_shared_prefix(nb::module_ &m);  // shared_prefix.cpp
}

NB_MODULE(_workload, m) {
    m.doc() = "The workloads' draws in C++, draw for draw numpy's on the same generator.";
    nanobind::set_leak_warnings(false);
    if (_import_array() < 0) throw nanobind::python_error();
    m.attr("NUMPY_VERSION") = NUMPY_BUILD_VERSION;
    workload::bind_agentic(m);
    workload::bind_shared_prefix(m);
    // For tests only (tests/test_core_draws.py): `generator.integers(low, high, n)` (int64) as the
    // workloads draw it in C++, and whether it was drawn inline on numpy's PCG64.
    m.def("_test_integers", [](nanobind::handle generator, int64_t low, int64_t high, int64_t n) {
        workload::Draws draws(generator);
        nanobind::object out = workload::new_array(npy_intp(n), NPY_INT64);
        draws.integers(workload::data_of<int64_t>(out), n, low, high);
        return nanobind::make_tuple(out, draws.draws_inline(low, high));
    });
    // Whether this build draws numpy's PCG64 inline (numpy_draws.hpp: where the compiler has 128-bit integers).
#ifdef WORKLOAD_INLINE_PCG64
    m.attr("INLINE_PCG64") = true;
#else
    m.attr("INLINE_PCG64") = false;
#endif
}
