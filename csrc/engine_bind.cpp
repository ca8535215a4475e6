// The compiled engine's Python face: what auction_gym/engine/sim_engine.py's CompiledSimEngine reads
// (the engine's clock, memory, queue and arrivals) and the iteration itself.
#include <nanobind/stl/shared_ptr.h>

#include "bindings.hpp"
#include "engine.hpp"
#include "gc_slots.hpp"

namespace nb = nanobind;
using engine::Arrivals;
using engine::Engine;

void bind_engine(nb::module_ &m) {
    nb::class_<Arrivals>(m, "EngineArrivals", "The compiled engine's arrivals (engine.arrivals.Arrivals's read API).")
        .def("submit", &Arrivals::submit, nb::arg("requests"))
        .def("next_time", &Arrivals::next_time)
        .def("next_possible", &Arrivals::next_possible)
        .def_prop_ro("pending", &Arrivals::pending)
        .def("pending_requests", &Arrivals::pending_requests)
        .def_rw("upstream", &Arrivals::upstream, nb::arg("upstream").none());
    nb::class_<Engine>(m, "Engine", "The compiled simulated engine (serving_engine.ServingEngine + SimEngine).",
                      nb::type_slots(gc_slots<Engine>))
        .def(nb::init<nb::handle, nb::handle, nb::handle, nb::handle, nb::dict>(), nb::arg("scheduler"),
             nb::arg("config"), nb::arg("cache"), nb::arg("waiting_prefixes"), nb::arg("records"))
        .def("step", &Engine::step, nb::arg("multipliers").none() = nb::none(),
             nb::arg("remaining").none() = nb::none())
        .def("play_round", &Engine::play_round, nb::arg("multipliers"), nb::arg("remaining").none(),
             nb::arg("busy_time"), nb::arg("admitted_total"),
             "Iterations until one admits or the workload runs dry: (admitted, decision, finished, busy_time, "
             "admitted_total, ran_dry).")
        .def("warm_up", &Engine::warm_up, nb::arg("until"), nb::arg("multipliers"), nb::arg("busy_time"),
             nb::arg("admitted_total"),
             "Iterations without budgets while the clock is before `until`: (busy_time, admitted_total).")
        .def_prop_ro("tally", [](const Engine &e) { return nb::make_tuple(e.tally.busy_time, e.tally.admitted_total); },
                     "(busy_time, admitted_total) after the last play_round's or warm_up's iterations, as far "
                     "as they ran (one may raise).")
        .def("in_system", &Engine::in_system)
        .def_prop_ro("arrivals", [](Engine &e) -> Arrivals & { return e.arrivals; }, nb::rv_policy::reference_internal)
        .def_prop_ro("waiting", [](const Engine &e) { return e.queue.requests; })
        .def_prop_ro("running", &Engine::running_requests)
        .def_ro("now", &Engine::now)
        .def_ro("reserved", &Engine::reserved)
        .def_prop_ro("used_tokens", &Engine::used_tokens)
        .def_prop_ro("active_tokens", &Engine::active_tokens)
        .def_prop_ro("new_token_ratio", &Engine::new_token_ratio);
}
