"""Old home of the admission arithmetic, which is now the engine's rule set (`rules.py`): its names
here are aliases that warn once. `AdmissionRules(config)` builds the rule set `config` selects."""

from .._deprecation import deprecated_aliases
from .rules import FutureOutput, rules_for

__getattr__ = deprecated_aliases(__name__, {
    "AdmissionRules": ("auction_gym.engine.rules.rules_for", lambda: rules_for),
    "FutureOutput": ("auction_gym.engine.rules.FutureOutput", lambda: FutureOutput),
})
