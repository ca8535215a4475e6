// The market's engine iterations in one call (auction_gym/market/market.py's `Market.step` and
// `Market.reset` loops over `Market._advance`, docs/engine.md section 8): the same iterations, and
// the busy time and admissions added up with the same double operations in the same order.
#include "engine.hpp"

namespace engine {

void RoundTally::add(const Step &s) {
    if (s.kind != Kind::idle) {
        busy_time += s.end - s.start;
        admitted_total += int64_t(s.admitted.size());
    }
}

// The tally is the engine's, added to as each iteration ends: where one raises, what those before it
// added is left for the market to read (`tally`), as its own loop would have added it.
nb::tuple Engine::play_round(nb::handle multipliers, nb::handle remaining, double busy_time, int64_t admitted_total) {
    tally = RoundTally{busy_time, admitted_total};
    Ids finished;
    while (true) {
        Step s = iterate(multipliers, remaining);
        if (s.kind == Kind::none)
            return nb::make_tuple(nb::list(), nb::none(), list_of(finished), tally.busy_time, tally.admitted_total,
                                  true);
        tally.add(s);
        finished.insert(finished.end(), s.finished.begin(), s.finished.end());
        if (!s.admitted.empty())  // a prefill that only continues a chunk or resumes is not a round
            return nb::make_tuple(list_of(s.admitted), s.decision, list_of(finished), tally.busy_time,
                                  tally.admitted_total, false);
    }
}

nb::tuple Engine::warm_up(double until, nb::handle multipliers, double busy_time, int64_t admitted_total) {
    tally = RoundTally{busy_time, admitted_total};
    while (now < until) {
        Step s = iterate(multipliers, nb::none());
        if (s.kind == Kind::none) break;
        tally.add(s);
    }
    return nb::make_tuple(tally.busy_time, tally.admitted_total);
}

}  // namespace engine
