// Python's sum() of floats from 0, as the interpreter the module is built for adds (payments.cpp,
// strict_priority.cpp).
#pragma once

#include <cmath>

namespace auction_core {

// From 3.12 with Neumaier's compensation, before it left to right.
class PySum {
public:
    explicit PySum(bool compensated) : compensated_(compensated) {}
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
