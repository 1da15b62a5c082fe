"""The playground's script modules: the page loads one entry, every import names a
script the server serves, every served script is reached, and no imports go round."""

from __future__ import annotations

import re

from ffwd.serve.playground import ASSETS, PAGE, SCRIPTS, static_file

ENTRY = "playground.js"
IMPORT = re.compile(r'^import \{[^}]*\} from "\./([\w.]+)";$', re.MULTILINE)


def imports(name: str) -> set[str]:
    return set(IMPORT.findall(static_file(name).decode()))


def test_the_page_loads_the_entry_as_a_module_and_preloads_the_rest() -> None:
    html = static_file(PAGE).decode()
    assert re.findall(r"<script[^>]*>", html) == [
        f'<script type="module" src="/playground/{ENTRY}">']
    preloaded = set(re.findall(r'<link rel="modulepreload" href="/playground/([\w.]+)">', html))
    assert preloaded == set(SCRIPTS) - {ENTRY}
    assert all(ASSETS[name].startswith("text/javascript") for name in SCRIPTS)


def test_every_import_is_served_and_every_script_is_reached() -> None:
    seen: set[str] = set()
    todo = [ENTRY]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            assert imports(name) <= set(SCRIPTS), name
            todo.extend(imports(name))
    assert seen == set(SCRIPTS)


def test_no_module_imports_itself_through_others() -> None:
    def reaches(start: str, goal: str, path: tuple[str, ...] = ()) -> bool:
        return any(n == goal or (n not in path and reaches(n, goal, (*path, n)))
                   for n in imports(start))

    assert [name for name in SCRIPTS if reaches(name, name)] == []
