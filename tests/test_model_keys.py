"""One rule for a model key, `provider:model` (common/model_keys.py): the model registry, the agent and case files'
schema and the project file answer alike for any text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost.llm import registry
from cases.schema import MODEL_KEY
from common.model_keys import split_model_key
from common.project_file import ProjectFileError, project_file_load

_KEYISH = st.text(alphabet=st.sampled_from("ab:  \t\n.-_8é"), max_size=12)


@given(_KEYISH)
def test_it_gives_every_reader_of_a_model_key_the_same_answer(key):
    split = split_model_key(key)
    schema_says = re.fullmatch(MODEL_KEY, key) is not None
    try:
        registry_says = registry.parse_model_key(key)
    except registry.UnknownModel:
        registry_says = None
    assert registry_says == split
    assert schema_says == (split is not None)
    if split is not None:
        assert f"{split[0]}:{split[1]}" == key


@pytest.mark.parametrize(
    ("key", "split"),
    [
        ("local:llama3:8b", ("local", "llama3:8b")),
        ("openai:gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("open ai:gpt-4o", None),
        ("openai:gpt 4o", None),
        ("openai:gpt-4o\n", None),
        (":gpt-4o", None),
        ("openai:", None),
        ("gpt-4o", None),
        (None, None),
    ],
)
def test_it_splits_a_model_key_at_its_first_colon_and_refuses_whitespace(key, split):
    assert split_model_key(key) == split


def test_it_refuses_in_the_project_file_a_model_key_the_registry_refuses(tmp_path):
    # The project file stripped the parts of a key before checking it, and took "open ai:m" that no provider can be
    # named (provider names have no space) and no run could use.
    (tmp_path / "agenttest.toml").write_text('[run]\nmodels = ["open ai:m"]\n')
    with pytest.raises(ProjectFileError, match="run.models: each must be a provider:model key"):
        project_file_load(tmp_path / "agenttest.toml")
