#!/usr/bin/env python3
"""Adds "python_text" to every chat of an expected-output file: the rendering of Python's jinja2
in the environment transformers' apply_chat_template uses (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loop controls; its own tojson and raise_exception).

    chat_template_reference.py EXPECTED.json TOKENIZER_CONFIG.json
"""
import json
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise ValueError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: json.dumps without HTML escaping.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    expected_path, config_path = sys.argv[1:3]
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])
    for chat in expected["chats"]:
        chat["python_text"] = template.render(**chat["variables"])
    with open(expected_path, "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main()
