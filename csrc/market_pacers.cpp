// The built-in pacers' multipliers (auction_gym/pacing.py, `MultiplierPolicy.multipliers` of
// `Truthful`, `FixedMultiplier`, `OGDPacer` and `PIDPacer`; docs/design.md section 8), every
// observation row in one call.
//
// Bit-identical to the Python: the same double operations in the same order, libm's expm1, log and
// exp as Python's math module calls them, each multiplier rounded to float32 as `array("f", ...)`
// rounds it. A row or parameter Python reads its own way (not a list of floats, an exact float), or
// a step where Python raises (a division by zero, math's domain and range errors), makes it answer
// None, and the policy runs its Python code, which raises its own error.
#include <nanobind/nanobind.h>

#include <cmath>
#include <vector>

#include "bindings.hpp"
#include "market_fields.hpp"

namespace nb = nanobind;

namespace {

using market_fields::as_float;
using market_fields::Unsupported;

// The pacers, as `pacing.py` numbers them (`MultiplierPolicy._COMPILED`).
enum Kind : int { TRUTHFUL = 0, FIXED = 1, OGD = 2, PID = 3 };

// The features the pacers read (`Obs`), given by the Python.
struct Features {
    Py_ssize_t budget_left, time_left, last_spend_log, prev_multiplier;
};

// A parameter of the pacer (a float, as its constructor stores it), by its interned `name`.
double attribute(nb::handle policy, PyObject *name) {
    nb::object value = nb::steal(PyObject_GetAttr(policy.ptr(), name));
    if (!value.is_valid()) {
        PyErr_Clear();
        throw Unsupported{};
    }
    return as_float(value.ptr());
}

double clip(double x, double low, double high) { return low > x ? low : high < x ? high : x; }

double divide(double a, double b) {
    if (b == 0.0) throw Unsupported{};  // ZeroDivisionError
    return a / b;
}

// Python's math.expm1 and math.exp: OverflowError where a finite argument overflows.
double expm1_checked(double x) {
    double y = std::expm1(x);
    if (std::isinf(y) && std::isfinite(x)) throw Unsupported{};
    return y;
}

double exp_checked(double x) {
    double y = std::exp(x);
    if (std::isinf(y) && std::isfinite(x)) throw Unsupported{};
    return y;
}

// Python's math.log: ValueError at 0 and below.
double log_checked(double x) {
    if (x <= 0.0) throw Unsupported{};
    return std::log(x);
}

// The parameters' names, interned once.
struct Names {
    PyObject *alpha, *eta, *lambda_max, *alpha_max, *kp, *ki, *alpha_min;
};

const Names &names() {
    static const Names n{PyUnicode_InternFromString("alpha"), PyUnicode_InternFromString("eta"),
                         PyUnicode_InternFromString("lambda_max"), PyUnicode_InternFromString("alpha_max"),
                         PyUnicode_InternFromString("kp"), PyUnicode_InternFromString("ki"),
                         PyUnicode_InternFromString("alpha_min")};  // never freed, as the interpreter's own
    return n;
}

class Pacing {
public:
    Pacing(int kind, nb::handle policy, const Features &f) : kind_(kind), f_(f) {
        const Names &name = names();
        if (kind == FIXED) alpha_ = attribute(policy, name.alpha);
        if (kind == OGD) {
            eta_ = attribute(policy, name.eta);
            lambda_max_ = attribute(policy, name.lambda_max);
            alpha_max_ = attribute(policy, name.alpha_max);
        }
        if (kind == PID) {
            kp_ = attribute(policy, name.kp);
            ki_ = attribute(policy, name.ki);
            alpha_min_ = attribute(policy, name.alpha_min);
            alpha_max_ = attribute(policy, name.alpha_max);
        }
        if (kind < TRUTHFUL || kind > PID) throw Unsupported{};
    }

    double alpha(PyObject *row) const {
        if (kind_ == TRUTHFUL) return 1.0;
        if (kind_ == FIXED) return alpha_;
        if (!PyList_CheckExact(row)) throw Unsupported{};
        return kind_ == OGD ? ogd(row) : pid(row);
    }

private:
    double feature(PyObject *row, Py_ssize_t j) const {
        if (j >= PyList_GET_SIZE(row)) throw Unsupported{};  // IndexError
        return as_float(PyList_GET_ITEM(row, j));
    }

    // OGDPacer._alpha
    double ogd(PyObject *row) const {
        double prev = feature(row, f_.prev_multiplier) * alpha_max_;
        double least = divide(1.0, 1.0 + lambda_max_);
        double lam = clip(divide(1.0, least > prev ? least : prev) - 1.0, 0.0, lambda_max_);
        double z = expm1_checked(feature(row, f_.last_spend_log));
        lam = clip(lam - eta_ * (1.0 - z), 0.0, lambda_max_);
        return divide(1.0, 1.0 + lam);
    }

    // PIDPacer._alpha
    double pid(PyObject *row) const {
        double prev = clip(feature(row, f_.prev_multiplier) * alpha_max_, alpha_min_, alpha_max_);
        double error = expm1_checked(feature(row, f_.last_spend_log)) - 1.0;
        double pace = feature(row, f_.time_left) - feature(row, f_.budget_left);
        double log_alpha = log_checked(prev) - kp_ * error - ki_ * pace;
        return clip(exp_checked(log_alpha), alpha_min_, alpha_max_);
    }

    int kind_;
    Features f_;
    double alpha_ = 0.0, eta_ = 0.0, lambda_max_ = 0.0, alpha_min_ = 0.0, alpha_max_ = 0.0, kp_ = 0.0, ki_ = 0.0;
};

// The pacers over the features at their indices in the observation (`Obs`).
class Pacers {
public:
    Pacers(Py_ssize_t budget_left, Py_ssize_t time_left, Py_ssize_t last_spend_log, Py_ssize_t prev_multiplier)
        : f_{budget_left, time_left, last_spend_log, prev_multiplier} {}

    nb::object multipliers(int kind, nb::handle policy, nb::handle rows) const {
        try {
            Pacing pacing(kind, policy, f_);
            if (!PyList_CheckExact(rows.ptr())) throw Unsupported{};
            Py_ssize_t k = PyList_GET_SIZE(rows.ptr());
            std::vector<double> out(static_cast<size_t>(k));
            for (Py_ssize_t i = 0; i < k; ++i)
                out[static_cast<size_t>(i)] = static_cast<float>(pacing.alpha(PyList_GET_ITEM(rows.ptr(), i)));
            nb::list multipliers = nb::steal<nb::list>(PyList_New(k));
            for (Py_ssize_t i = 0; i < k; ++i) {
                PyObject *a = PyFloat_FromDouble(out[static_cast<size_t>(i)]);
                if (!a) throw nb::python_error();
                PyList_SET_ITEM(multipliers.ptr(), i, a);
            }
            return multipliers;
        } catch (const Unsupported &) {
            return nb::none();
        }
    }

private:
    Features f_;
};

}  // namespace

void bind_market_pacers(nb::module_ &m) {
    nb::class_<Pacers>(m, "Pacers", "The built-in pacers' multipliers, compiled (MultiplierPolicy.multipliers).")
        .def(nb::init<Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t>(), nb::arg("budget_left"), nb::arg("time_left"),
             nb::arg("last_spend_log"), nb::arg("prev_multiplier"))
        .def("__call__", &Pacers::multipliers, nb::arg("kind"), nb::arg("policy"), nb::arg("rows"),
             "The pacer of `kind`'s multipliers of observation rows (lists of floats), rounded to float32, or None "
             "for input its Python code must handle.");
}
