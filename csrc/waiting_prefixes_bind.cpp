// The compiled prefix matcher's and waiting prefixes' Python face: the API of
// auction_gym/prefix_matcher.py's PrefixMatcher and waiting_prefixes.py's WaitingPrefixes.

#include "bindings.hpp"
#include "gc_slots.hpp"
#include "waiting_prefixes.hpp"

namespace nb = nanobind;
using radix::PrefixMatcher;
using radix::WaitingPrefixes;

namespace {

void bind_matcher(nb::module_ &m) {
    nb::class_<PrefixMatcher>(m, "PrefixMatcher",
                              "The compiled prefix matcher (prefix_matcher.PrefixMatcher's API and results).",
                              nb::type_slots(gc_slots<PrefixMatcher>))
        .def(nb::init<bool, bool>(), nb::arg("split") = false, nb::arg("whole_prompt") = false)
        .def("update", &PrefixMatcher::update, nb::arg("queue"), nb::arg("cache"),
             nb::arg("changes").none() = nb::none())
        .def_ro("split", &PrefixMatcher::split)
        .def_ro("whole_prompt", &PrefixMatcher::whole_prompt)
        .def_ro("requests", &PrefixMatcher::requests)
        .def_ro("length_of", &PrefixMatcher::length_of)
        .def_ro("dropped", &PrefixMatcher::dropped)
        .def_ro("added", &PrefixMatcher::added)
        .def_ro("splits", &PrefixMatcher::splits)
        .def_ro("joined", &PrefixMatcher::joined)
        .def_ro("left", &PrefixMatcher::left)
        .def_ro("rematched", &PrefixMatcher::rematched)
        .def_ro("_match", &PrefixMatcher::match);
}

void bind_waiting(nb::module_ &m) {
    nb::class_<WaitingPrefixes>(m, "WaitingPrefixes",
                                "The compiled waiting prefixes (waiting_prefixes.WaitingPrefixes's API and results).",
                                nb::type_slots(gc_slots<WaitingPrefixes>))
        .def(nb::init<>())
        .def("refresh", &WaitingPrefixes::refresh, nb::arg("waiting"), nb::arg("cache"),
             nb::arg("changes").none() = nb::none())
        .def("lengths", &WaitingPrefixes::lengths, nb::arg("queue"), nb::arg("cache"))
        .def("delta_since", &WaitingPrefixes::delta_since, nb::arg("serial"))
        .def("start", &WaitingPrefixes::start, nb::arg("r"), nb::arg("limit"))
        .def_prop_ro("length_of", [](const WaitingPrefixes &w) { return w.matcher.length_of; })
        .def_ro("serial", &WaitingPrefixes::serial)
        .def_ro("_matcher", &WaitingPrefixes::matcher)
        .def_prop_ro("_rank", &WaitingPrefixes::ranks);
}

}  // namespace

void bind_waiting_prefixes(nb::module_ &m) {
    bind_matcher(m);
    bind_waiting(m);
}
