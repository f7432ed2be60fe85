"""The rules a suite and a case must meet, in one package: the API, the admin, import and recording all apply these.

By concern: problems.py (what is wrong, and the building blocks every check shares), callable_functions.py (what
the agents under test can call), parts.py (the meaning of a case's parts), case_documents.py (a case, whole or a part
at a time, and its warnings), suites.py (a suite, and whether it is hermetic). Callers import from those modules.

A suite's shape and limits are the JSON Schema `suite-document` of cases/schema.py, checked first; what follows here
is only what needs the database. A case travels as a JSON document whose shape is the JSON Schema `case-document` of
cases/schema.py — generated from the same definition as the published schema of case files, and checked by
jsonschema, not by hand here; this package adds what a schema cannot know (case_documents.py). Validation never
stops at the first problem: every problem is reported with the path of the field it concerns
(`turns[1].assertions[0].params.pattern`), because the person fixing a recorded draft or an import file wants the
whole list at once.

JSON-valued fields (objects and lists such as `initial_state` or assertion `params`) may also arrive as JSON text —
from a text box or a hand-edited file — and are parsed here, so the same rules apply however the value was written.
They may nest at most MAX_JSON_DEPTH deep and hold only finite numbers (no NaN, Infinity or 1e999).

Every function name must be one the agents under test can call (see CallableFunctions): a mock or a toolCalled /
toolNotCalled assertion, against the case's entry agent and the sub-agents it can route to; a suite's extra-allowed
and force-blocked names (stripped, as mock names are), against every agent a case of the suite can reach. A name
that matches nothing would silently mock, allow or block nothing. Extra-allowed functions must also be declared free
of effects outside agenttest: the others are to be mocked.
"""
