// numpy's Generator draws, made in C++ on the generator's own bit generator state: each draw calls
// the C function of numpy's random library (libnpyrandom.a, linked in) that the Generator method
// calls for an array, in the same order, so Python and C++ draws interleave on one state and give
// numpy's numbers. Also the numpy arrays the workload hands to Python, made through numpy's C API.
//
// What each Generator method calls (numpy's _generator.pyx, _common.pyx, _bounded_integers.pyx):
// random(n) random_standard_uniform_fill; standard_normal(shape) random_standard_normal_fill over
// the shape in C order; exponential(scale, n) random_exponential per element; poisson(lam, n)
// random_poisson and geometric(p, n) random_geometric per element; integers(low, high, n) (int64,
// Lemire's method) random_bounded_uint64_fill(low, high - 1 - low), one call for the whole array,
// drawn here instead (pcg64_bounded_fill) on numpy's PCG64 where numpy draws it from 32-bit words.
#pragma once

#include <nanobind/nanobind.h>

// One table of numpy's C API for the module, filled at its import (module.cpp).
#define NPY_NO_DEPRECATED_API NPY_1_23_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL auction_gym_workload_ARRAY_API
#ifndef WORKLOAD_IMPORTS_NUMPY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#include <numpy/random/distributions.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace workload {

namespace nb = nanobind;

struct Pcg64State;

// The inline draws need 128-bit integers (GCC and Clang have them); without, every draw goes
// through libnpyrandom, the same numbers.
#if defined(__SIZEOF_INT128__)
#define WORKLOAD_INLINE_PCG64 1

__extension__ typedef unsigned __int128 uint128_t;

// numpy's PCG64 state as numpy/random/src/pcg64/pcg64.h lays it out where the compiler has 128-bit
// integers: the bit generator's C state is a pcg64_state, whose first field points at the LCG.
struct Pcg64Lcg {
    uint128_t state, inc;
};
struct Pcg64State {
    Pcg64Lcg *lcg;
    int has_uint32;     // next_uint32 buffers a 64-bit output's high half for the next call
    uint32_t uinteger;  // that half (left as it was once taken)
};

// A 128-bit unsigned value as a Python int.
inline nb::object py_uint128(uint128_t x) {
    return nb::steal(PyLong_FromUnsignedLongLong(uint64_t(x >> 64))) << nb::int_(64) |
           nb::steal(PyLong_FromUnsignedLongLong(uint64_t(x)));
}

// The C state of `bit_generator` where it is exactly numpy's PCG64 and that state reads as
// Pcg64State (the LCG's state and increment and the buffered half equal to what its `state`
// property reports), else null, and its draws go through libnpyrandom.
inline Pcg64State *pcg64_state_of(nb::handle bit_generator, const bitgen_t *bitgen) {
    if (!bit_generator.type().is(nb::module_::import_("numpy.random").attr("PCG64"))) return nullptr;
    auto *s = static_cast<Pcg64State *>(bitgen->state);
    if (!s || !s->lcg) return nullptr;
    nb::object reported = bit_generator.attr("state"), lcg = reported["state"];
    const bool same = py_uint128(s->lcg->state).equal(lcg["state"]) && py_uint128(s->lcg->inc).equal(lcg["inc"]) &&
                      nb::int_(s->has_uint32).equal(reported["has_uint32"]) &&
                      nb::int_(s->uinteger).equal(reported["uinteger"]);
    return same ? s : nullptr;
}

// numpy's PCG64 as pcg64.h draws it: the LCG step state * multiplier + inc, the XSL-RR output
// (the high and low halves xor-ed, rotated right by the state's top 6 bits), and pcg64_next32's
// buffered halves (a fresh output's low half, then its high half at the next call). A value copied
// from the C state and written back (pcg64_bounded_fill), so the compiler keeps it in registers.
struct Pcg64 {
    uint128_t state;
    uint128_t inc;
    int has_half;
    uint32_t half;  // left as it was once taken, as numpy leaves it

    static Pcg64 of(const Pcg64State *s) { return {s->lcg->state, s->lcg->inc, s->has_uint32, s->uinteger}; }

    void store(Pcg64State *s) const {
        s->lcg->state = state;
        s->has_uint32 = has_half;
        s->uinteger = half;
    }

    uint64_t next64() {
        constexpr uint128_t multiplier = uint128_t(2549297995355413924ULL) << 64 | 4865540595714422341ULL;
        state = state * multiplier + inc;
        const uint64_t folded = uint64_t(state >> 64) ^ uint64_t(state);
        const unsigned rot = unsigned(state >> 122);
        return folded >> rot | folded << (-rot & 63u);
    }

    uint32_t next32() {
        if (has_half) {
            has_half = 0;
            return half;
        }
        const uint64_t x = next64();
        has_half = 1;
        half = uint32_t(x >> 32);
        return uint32_t(x);
    }
};

// random_bounded_uint64_fill(off, rng, n) on numpy's PCG64 state `s`, for 0 < rng < 2^32 - 1, where
// numpy takes buffered_bounded_lemire_uint32 for each draw: Lemire's method, a 32-bit word times
// rng + 1, its high word the draw unless its low word falls below (2^32 - (rng + 1)) mod (rng + 1),
// when the word is drawn again (that bound is below rng + 1, so numpy's first test against rng + 1
// only saves computing it). Where no half is buffered, two draws take the two halves of one
// output, low then high, as next32 hands them out; where one of them is rejected (rarely, for a
// small range), they are drawn one word at a time instead. The state is written back after, so
// the draws that follow, Python's or libnpyrandom's, go on from where these stop.
inline void pcg64_bounded_fill(Pcg64State *s, uint64_t off, uint32_t rng, int64_t n, uint64_t *out) {
    const uint32_t excl = rng + 1, threshold = (UINT32_MAX - rng) % excl;
    Pcg64 g = Pcg64::of(s);
    auto bounded = [&](uint32_t word) {
        uint64_t m = uint64_t(word) * excl;
        while (uint32_t(m) < threshold) m = uint64_t(g.next32()) * excl;
        return off + (m >> 32);
    };
    for (int64_t i = 0; i < n;) {
        if (g.has_half || i + 1 == n) {
            out[i++] = bounded(g.next32());
            continue;
        }
        uint64_t x = 0;
        for (; i + 1 < n; i += 2) {
            x = g.next64();
            const uint64_t low = (x & UINT32_MAX) * excl, high = (x >> 32) * excl;
            if (uint32_t(low) < threshold || uint32_t(high) < threshold) break;
            out[i] = off + (low >> 32);
            out[i + 1] = off + (high >> 32);
        }
        g.half = uint32_t(x >> 32);
        if (i + 1 < n) {  // a half rejected: this output's halves one at a time
            g.has_half = 1;
            out[i++] = bounded(uint32_t(x));
        }
    }
    g.store(s);
}

#endif  // __SIZEOF_INT128__

// The draws of one numpy Generator, on its bit generator's state (held while drawing).
class Draws {
public:
    explicit Draws(nb::handle generator)
        : generator_(nb::borrow(generator)), bit_generator_(generator.attr("bit_generator")) {
        nb::object capsule = bit_generator_.attr("capsule");
        state_ = static_cast<bitgen_t *>(PyCapsule_GetPointer(capsule.ptr(), "BitGenerator"));
        if (!state_) throw nb::python_error();
#ifdef WORKLOAD_INLINE_PCG64
        pcg64_ = pcg64_state_of(bit_generator_, state_);
#endif
    }

    nb::object generator() const { return generator_; }
    // Whether integers(low, high, n) draws inline (pcg64_bounded_fill) rather than through libnpyrandom.
    bool draws_inline(int64_t low, int64_t high) const {
        const uint64_t rng = bounded_range(low, high);
        return pcg64_ && rng != 0 && rng < UINT32_MAX;
    }

    void uniform(double *out, int64_t n) { random_standard_uniform_fill(state_, n, out); }
    void normal(double *out, int64_t n) { random_standard_normal_fill(state_, n, out); }
    void exponential(double *out, int64_t n, double scale) {
        for (int64_t i = 0; i < n; ++i) out[i] = random_exponential(state_, scale);
    }
    // poisson(mean, n) raised to at least 1, as the workloads' lengths are.
    void lengths(int64_t *out, int64_t n, double mean) {
        for (int64_t i = 0; i < n; ++i) {
            int64_t k = random_poisson(state_, mean);
            out[i] = k < 1 ? 1 : k;
        }
    }
    void geometric(int64_t *out, int64_t n, double p) {
        for (int64_t i = 0; i < n; ++i) out[i] = random_geometric(state_, p);
    }
    // integers(low, high, n): uniform in [low, high). Each draw reads nothing but the bit generator's
    // state (numpy's fill keeps no buffer of its own for int64), so n draws are those of any split
    // of n into consecutive calls.
    void integers(int64_t *out, int64_t n, int64_t low, int64_t high) {
        if (n <= 0) return;
        auto *words = reinterpret_cast<uint64_t *>(out);
#ifdef WORKLOAD_INLINE_PCG64
        if (draws_inline(low, high)) {
            pcg64_bounded_fill(pcg64_, uint64_t(low), uint32_t(bounded_range(low, high)), n, words);
            return;
        }
#endif
        random_bounded_uint64_fill(state_, uint64_t(low), bounded_range(low, high), n, false, words);
    }

private:
    // numpy's rng for integers(low, high): the inclusive range high - 1 - low, as a uint64.
    static uint64_t bounded_range(int64_t low, int64_t high) { return uint64_t(high) - 1 - uint64_t(low); }

    nb::object generator_, bit_generator_;
    bitgen_t *state_;
    Pcg64State *pcg64_ = nullptr;  // the bit generator's state where it is PCG64's as Pcg64State reads it
};

// A new numpy array of `dims` (C order) of `type`, owning its data.
inline nb::object new_array(int ndim, const npy_intp *dims, int type) {
    PyObject *a = PyArray_SimpleNew(ndim, const_cast<npy_intp *>(dims), type);
    if (!a) throw nb::python_error();
    return nb::steal(a);
}

inline nb::object new_array(npy_intp n, int type) { return new_array(1, &n, type); }

template <typename T>
T *data_of(nb::handle array) {
    return static_cast<T *>(PyArray_DATA(reinterpret_cast<PyArrayObject *>(array.ptr())));
}

inline nb::object sealed(nb::object array) {
    PyArray_CLEARFLAGS(reinterpret_cast<PyArrayObject *>(array.ptr()), NPY_ARRAY_WRITEABLE);
    return array;
}

// A read-only 1-D int64 view of `n` elements at `data` inside `base` (an array owning its data),
// as numpy's slice of `base` is: its base is `base`.
inline nb::object view(nb::handle base, int64_t *data, npy_intp n) {
    PyObject *v = PyArray_NewFromDescr(&PyArray_Type, PyArray_DescrFromType(NPY_INT64), 1, &n, nullptr, data,
                                       NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, nullptr);
    if (!v) throw nb::python_error();
    Py_INCREF(base.ptr());
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject *>(v), base.ptr()) < 0) {
        Py_DECREF(v);
        throw nb::python_error();
    }
    return nb::steal(v);
}

// `obj` as a C-contiguous array of `type` (itself where it is one): what a Python function handed back.
inline nb::object as_array(nb::handle obj, int type) {
    PyObject *a = PyArray_FROM_OTF(obj.ptr(), type, NPY_ARRAY_IN_ARRAY);
    if (!a) throw nb::python_error();
    return nb::steal(a);
}

// A read-only 1-D int64 array (a bidder's prefix), checked once; its data lives as long as it does.
struct Tokens {
    nb::object array;
    const int64_t *data;
    npy_intp size;
};

inline Tokens tokens_of(nb::handle obj) {
    auto *a = reinterpret_cast<PyArrayObject *>(obj.ptr());
    if (!PyArray_Check(obj.ptr()) || PyArray_TYPE(a) != NPY_INT64 || PyArray_NDIM(a) != 1 ||
        !PyArray_IS_C_CONTIGUOUS(a)) {
        throw nb::type_error("declined: a prefix that is not a contiguous 1-D int64 array");
    }
    return {nb::borrow(obj), static_cast<const int64_t *>(PyArray_DATA(a)), PyArray_DIM(a, 0)};
}

// A new read-only int64 array: `prefix`, then `n` tokens drawn after it (`integers(0, vocab, n)`):
// a prompt of a fixed prefix and fresh tokens, as the generators concatenate one.
inline nb::object after_prefix(Draws &draws, const Tokens &prefix, int64_t n, int64_t vocab) {
    nb::object out = new_array(prefix.size + n, NPY_INT64);
    draws.integers(std::copy(prefix.data, prefix.data + prefix.size, data_of<int64_t>(out)), n, 0, vocab);
    return sealed(out);
}

inline nb::object interned(const char *s) { return nb::steal(PyUnicode_InternFromString(s)); }
inline nb::object py_float(double x) { return nb::steal(PyFloat_FromDouble(x)); }
inline nb::object py_int(int64_t x) { return nb::steal(PyLong_FromLongLong(x)); }

// Python's tuple of `items`, each reference taken.
inline nb::object draft(std::initializer_list<nb::handle> items) {
    PyObject *t = PyTuple_New(Py_ssize_t(items.size()));
    if (!t) throw nb::python_error();
    Py_ssize_t i = 0;
    for (nb::handle h : items) {
        Py_INCREF(h.ptr());
        PyTuple_SET_ITEM(t, i++, h.ptr());
    }
    return nb::steal(t);
}

// The configuration's numbers are read only where they are exact Python ints and floats, whose
// arithmetic here is Python's and numpy's; any other (a numpy scalar, a bool, an int past 64 bits)
// is declined with a TypeError, before any draw, and the Python generator draws instead.
inline int64_t exact_int(nb::handle x) {
    int overflow = 0;
    long long v = PyLong_CheckExact(x.ptr()) ? PyLong_AsLongLongAndOverflow(x.ptr(), &overflow) : 0;
    if (!PyLong_CheckExact(x.ptr()) || overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        throw nb::type_error("declined: not an int within 64 bits");
    }
    return v;
}

// An exact float or int as numpy's draws take a scalar parameter (PyFloat_AsDouble), and as
// Python's arithmetic uses it.
inline double as_double(nb::handle x) {
    if (!PyFloat_CheckExact(x.ptr()) && !PyLong_CheckExact(x.ptr())) throw nb::type_error("declined: not a number");
    double v = PyFloat_AsDouble(x.ptr());
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        throw nb::type_error("declined: an int too large for a float");
    }
    return v;
}

// A Poisson mean numpy's poisson() takes: it raises ValueError for a NaN or negative one and for one
// above POISSON_LAM_MAX (int64's largest less 10 x its square root, about 9.22e18), where
// random_poisson would draw regardless. From a little below that bound on, the Python draws, and
// raises where numpy does.
inline double poisson_mean(nb::handle x) {
    const double mean = as_double(x);
    if (!(mean >= 0.0 && mean <= 9.0e18)) throw nb::type_error("declined: a mean numpy's poisson() refuses");
    return mean;
}

// `n` candidate arrival starts after `t`, a Poisson process of mean gap `scale`:
// t + exponential(scale, n).cumsum(), numpy's cumsum being a sum in order.
inline std::vector<double> starts_after(Draws &draws, double t, int64_t n, double scale) {
    std::vector<double> starts(n);
    draws.exponential(starts.data(), n, scale);
    for (int64_t i = 1; i < n; ++i) starts[i] = starts[i - 1] + starts[i];
    for (double &s : starts) s = t + s;
    return starts;
}

// A workload's burst windows (`agentic.has_bursts`, `in_burst`), read from a generator's `bursty`
// and its configuration's burst fields: the arrival rate is `factor` times higher in a window of
// `duration` at the start of every `period`.
struct Bursts {
    bool on;
    double period, duration, factor;

    static Bursts of(nb::handle generator) {
        nb::object cfg = generator.attr("cfg");
        return {PyObject_IsTrue(generator.attr("bursty").ptr()) == 1, as_double(cfg.attr("burst_period")),
                as_double(cfg.attr("burst_duration")), as_double(cfg.attr("burst_factor"))};
    }

    // The rate multiplier at a start t >= 0 (whose np.mod is fmod, exact).
    double rate(double t) const { return on && std::fmod(t, period) < duration ? factor : 1.0; }
};

// The class a uniform draw `u` picks: searchsorted(cdf, u, side="right") over the sorted `cdf`,
// capped at the last class (rounding may leave the cdf's end below 1).
inline int64_t class_of(const std::vector<double> &cdf, double u) {
    return std::min(int64_t(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin()), int64_t(cdf.size()) - 1);
}

// Standard normals of shape (3, n), as `standard_normal((3, n))` draws them.
inline nb::object normals(Draws &draws, int64_t n) {
    npy_intp dims[2] = {3, npy_intp(n)};
    nb::object z = new_array(2, dims, NPY_FLOAT64);
    draws.normal(data_of<double>(z), 3 * n);
    return z;
}

// Requests' urgencies, values and output lengths, as a class's `from_normals` draws them.
struct ClassDraws {
    std::vector<double> urgency, value;
    std::vector<int64_t> output;
};

// One class's parameters, in `classes._from_normals`' order.
struct ClassLaw {
    double urgency_median, urgency_sigma, horizon_median, horizon_sigma, output_median, output_sigma, output_max;
};

// The draws of a class or a mix of classes, `(from_normals, laws)` as `classes.class_laws` gives
// them: where it names the laws (the classes' own `_from_normals`), `classes._from_normals`'
// arithmetic made here, each multiplication, rounding and clip the same double operation as numpy's
// (exact, or correctly rounded), and each exp numpy's own: the `numpy.exp` ufunc called on a fresh
// array of the same n products, as the Python calls it, since numpy's vectorized exp may round
// otherwise than libm. Elsewhere (a class that draws its own way) its `from_normals` is called.
class ClassLaws {
public:
    explicit ClassLaws(nb::handle class_laws) : from_normals_(class_laws[0]) {
        nb::object laws = class_laws[1];
        if (laws.is_none()) return;
        exp_ = nb::module_::import_("numpy").attr("exp");
        for (nb::handle law : laws) {
            laws_.push_back({as_double(law[0]), as_double(law[1]), as_double(law[2]), as_double(law[3]),
                             as_double(law[4]), as_double(law[5]), as_double(law[6])});
        }
    }

    // `n` requests' draws over n fresh normals (3, n): of the one class, or request i of class
    // which[i] of the mix (`which` an int64 array).
    ClassDraws draw(Draws &draws, int64_t n, nb::handle which = nb::handle()) const {
        nb::object z = normals(draws, n);
        if (laws_.empty()) return called(which.is_valid() ? from_normals_(which, z) : from_normals_(z));
        const int64_t *c = which.is_valid() ? data_of<int64_t>(which) : nullptr;
        const double *z0 = data_of<double>(z), *z1 = z0 + n, *z2 = z1 + n;
        auto law = [&](int64_t i) -> const ClassLaw & { return laws_[c ? c[i] : 0]; };
        ClassDraws d{std::vector<double>(n), std::vector<double>(n), std::vector<int64_t>(n)};
        nb::object e = exp_of(n, [&](int64_t i) { return law(i).urgency_sigma * z0[i]; });
        for (int64_t i = 0; i < n; ++i) d.urgency[i] = law(i).urgency_median * data_of<double>(e)[i];
        e = exp_of(n, [&](int64_t i) { return law(i).horizon_sigma * z1[i]; });
        for (int64_t i = 0; i < n; ++i) d.value[i] = d.urgency[i] * (law(i).horizon_median * data_of<double>(e)[i]);
        e = exp_of(n, [&](int64_t i) { return law(i).output_sigma * z2[i]; });
        for (int64_t i = 0; i < n; ++i) {
            // np.maximum and np.minimum keep a NaN; astype(int64) of one is x86's INT64_MIN
            double out = std::nearbyint(law(i).output_median * data_of<double>(e)[i]);
            out = out >= 1.0 || std::isnan(out) ? out : 1.0;
            out = out <= law(i).output_max || std::isnan(out) ? out : law(i).output_max;
            d.output[i] = std::isnan(out) ? INT64_MIN : int64_t(out);
        }
        return d;
    }

private:
    template <class F>
    nb::object exp_of(int64_t n, F product) const {
        nb::object x = new_array(npy_intp(n), NPY_FLOAT64);
        for (int64_t i = 0; i < n; ++i) data_of<double>(x)[i] = product(i);
        return as_array(exp_(x), NPY_FLOAT64);
    }

    // What a Python `from_normals` handed back, read into vectors.
    static ClassDraws called(nb::handle drawn) {
        nb::object w = as_array(drawn[0], NPY_FLOAT64), v = as_array(drawn[1], NPY_FLOAT64),
                   out = as_array(drawn[2], NPY_INT64);
        const auto n = PyArray_SIZE(reinterpret_cast<PyArrayObject *>(w.ptr()));
        return {std::vector<double>(data_of<double>(w), data_of<double>(w) + n),
                std::vector<double>(data_of<double>(v), data_of<double>(v) + n),
                std::vector<int64_t>(data_of<int64_t>(out), data_of<int64_t>(out) + n)};
    }

    nb::object from_normals_, exp_;
    std::vector<ClassLaw> laws_;
};

}  // namespace workload
