// Python's sum() of floats from 0, as the interpreter the module is built for adds (payments.cpp,
// strict_priority.cpp, queue_tree.cpp, market_round.cpp).
#pragma once

#include <Python.h>

#include <cmath>

namespace auction_core {

// Whether the interpreter's sum() of floats compensates (from 3.12, Neumaier's), else left to right.
inline constexpr bool PY_SUM_COMPENSATED = PY_VERSION_HEX >= 0x030C0000;

// sum() as an interpreter that compensates or not adds (by default the one the module is built for).
class PySum {
public:
    explicit PySum(bool compensated = PY_SUM_COMPENSATED) : compensated_(compensated) {}
    void add(double x) {
        const double t = total_ + x;
        if (compensated_) c_ += std::fabs(total_) >= std::fabs(x) ? (total_ - t) + x : (x - t) + total_;
        total_ = t;
    }
    double value() const { return compensated_ && c_ != 0.0 && std::isfinite(c_) ? total_ + c_ : total_; }

private:
    bool compensated_;
    double total_ = 0.0, c_ = 0.0;
};

}  // namespace auction_core
