"""The whole house's layout, read from the code's own imports (module level and inside functions),
as tests/nn/test_house.py reads nn/:

1. Arrows point down only: each room imports only rooms on a lower floor (docs/architecture.md);
   the one arrow up is experiments/child.py -> cli (a sweep's cell runs through the front door).
2. serve/ knows no model internals: it imports no models/, nn/, interop/, train/ or data/; it
   reaches a task through the task's public API and its face (tasks/faces.py).
3. No file-level import circle anywhere in the package (a package's `__init__.py` hands names on
   and is not followed, as farm-studio draws it): the task registry (tasks/faces.py) imports the
   task packages' face.py files, and those import only the record (tasks/slots.py).
4. Commands hold no policy about tasks, and no file outside a task's own package and the
   registry (tasks/<task>/, tasks/faces.py) dispatches on a task's name: no comparison with a
   task's name, no dict keyed by task names, no list of task names (a choice list), no
   `choices=` naming a task, an export format or an export engine, no `__name__ ==` test and no
   `import_module(f"...{task}...")`: they ask `task_of(run_dir)` / `face(name)`, and every list
   of tasks, formats and engines is made from `faces()`. commands/ also imports no models/ and
   no nn/ (no model code and no kernel choice in a verb).
"""
import ast
from pathlib import Path

import scratchformer
from scratchformer.tasks.faces import _PACKAGES

PKG = Path(scratchformer.__file__).parent
FLOOR = {"errors": 0, "fileio": 1, "folders": 1.5, "progress": 1, "config": 2, "fonts": 2, "data": 2, "nn": 3, "train": 3, "check": 3, "models": 4,
         "interop": 5, "tasks": 6, "diagnostics": 7, "experiments": 8, "serve": 8, "commands": 9, "cli": 10,
         "demo": 10, "__init__": 11}
UP_ON_PURPOSE = {("experiments/child.py", "cli")}
TASK_NAMES = set(_PACKAGES)  # the built-in tasks: a new one is named here by the registry itself
# export formats and the engines that run them (a `choices=` naming one is a hand-kept list)
REGISTRY_WORDS = TASK_NAMES | {"onnx", "transformers", "ctranslate2", "onnxruntime"}


def outside_the_tasks(path: Path) -> bool:
    """Every file of the package but a task's own package (tasks/<task>/) and the registry."""
    rel = path.relative_to(PKG)
    return not (rel.parts[0] == "tasks" and (len(rel.parts) > 2 or rel.name == "faces.py"))


def room(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_rooms(path: Path) -> set[str]:
    """The top-level rooms of scratchformer that `path` imports (relative or absolute)."""
    me = list(path.relative_to(PKG).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = me[:len(me) - node.level]
            targets = [base + node.module.split(".")] if node.module else [base + [a.name] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "scratchformer":
            targets = [node.module.split(".")[1:]]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == "scratchformer"]
        found.update(t[0] for t in targets if t)
    return found - {room(path)}


def files():
    return [p for p in sorted(PKG.rglob("*.py")) if "page" not in p.relative_to(PKG).parts]


def test_every_room_has_a_floor_and_every_arrow_points_down():
    up = set()
    for p in files():
        mine = room(p)
        assert mine in FLOOR, f"{p.relative_to(PKG)}: a new room; give it a floor here and in docs/architecture.md"
        for other in imported_rooms(p):
            assert other in FLOOR, (p, other)
            if FLOOR[other] >= FLOOR[mine]:
                up.add((str(p.relative_to(PKG)), other))
    assert up == UP_ON_PURPOSE, f"arrows that do not point down: {sorted(up - UP_ON_PURPOSE)}"


def file_graph(pkg: Path) -> dict[str, set[str]]:
    """module -> the modules of the package it imports (dotted, relative to the package)."""
    mods = {".".join(p.relative_to(pkg).with_suffix("").parts): p for p in pkg.rglob("*.py")}

    def resolve(parts):
        name = ".".join(parts)
        return name if name in mods else name + ".__init__" if name + ".__init__" in mods else None

    graph = {}
    for name, path in mods.items():
        me, out = name.split("."), set()
        graph[name] = out
        if me[-1] == "__init__":
            continue  # a package's face: it hands names on
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("scratchformer")):
                base = me[:len(me) - node.level] if node.level else []
                mod = node.module.split(".")[(0 if node.level else 1):] if node.module else []
                out.update(t for a in node.names if (t := resolve(base + mod + [a.name]) or resolve(base + mod)))
            elif isinstance(node, ast.Import):
                out.update(t for a in node.names if a.name.startswith("scratchformer.") and
                           (t := resolve(a.name.split(".")[1:])))
        out.discard(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` (strongly connected groups of two or more modules)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_file_of_the_package_is_in_an_import_circle():
    graph = file_graph(PKG)
    assert "tasks.faces" in graph and "tasks.classify.face" in graph["tasks.faces"]  # the scan sees lazy imports
    assert circles(graph) == []


def test_the_circle_finder_sees_a_planted_circle(tmp_path):
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    (tmp_path / "c.py").write_text("from .a import x\n")
    assert circles(file_graph(tmp_path)) == [["a", "b"]]


def test_serve_imports_no_model_internals():
    seen = set()
    for p in (PKG / "serve").glob("*.py"):
        seen |= imported_rooms(p)
    assert "tasks" in seen and "diagnostics" in seen  # the scan sees serve's arrows at all
    assert seen & {"models", "nn", "interop", "train", "data"} == set(), seen


def name_tests(path: Path, dunder: bool = True) -> list[str]:
    """Where `path` dispatches on a task's name: a comparison with one, a dict keyed by them, a
    list of them or a choice list of registry words, a `__name__` test (with `dunder`: the rooms
    above tasks/, where it would tell our classes apart), an import_module of a formatted name."""
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def names_in(node) -> set[str]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {i.value for i in items if isinstance(i, ast.Constant) and i.value in TASK_NAMES}

    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and len(names_in(node)) >= 2:
            out.append(f"{path.name}:{node.lineno} a list of task names")
        elif isinstance(node, ast.keyword) and node.arg == "choices" and isinstance(
                node.value, (ast.List, ast.Tuple, ast.Set)) and any(
                isinstance(i, ast.Constant) and i.value in REGISTRY_WORDS for i in node.value.elts):
            out.append(f"{path.name}:{node.lineno} a choice list of tasks, formats or engines")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_in(s) for s in sides):
                out.append(f"{path.name}:{node.lineno} compares with a task name")
            if dunder and any(isinstance(s, ast.Attribute) and s.attr == "__name__" for s in sides):
                out.append(f"{path.name}:{node.lineno} tests a __name__")
        elif isinstance(node, ast.Dict):
            if len({k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in TASK_NAMES}) >= 2:
                out.append(f"{path.name}:{node.lineno} a dict keyed by task names")
        elif isinstance(node, ast.Call):
            f = node.func
            if (getattr(f, "attr", None) or getattr(f, "id", None)) == "import_module" and node.args and \
                    isinstance(node.args[0], ast.JoinedStr):
                out.append(f"{path.name}:{node.lineno} imports a module by a formatted name")
    return out


def test_no_file_outside_the_tasks_names_a_task_in_a_condition_a_choice_list_or_a_table():
    scanned = [p for p in files() if outside_the_tasks(p)]
    rooms = {room(p) for p in scanned}
    assert {"cli", "commands", "serve", "diagnostics", "experiments", "tasks", "data", "train"} <= rooms
    assert not any(p.parent.parent == PKG / "tasks" for p in scanned)  # the task packages are theirs
    found = [m for p in scanned for m in name_tests(p, dunder=FLOOR[room(p)] > FLOOR["tasks"])]
    assert found == []


def test_no_room_outside_interop_imports_the_e5_module():
    """Models are named by the pretrained zoo (interop/zoo.py: how each entry materialises itself,
    its input prefixes), so a room above interop/ needs no `is_e5` of its own."""
    graph = file_graph(PKG)
    assert "interop.e5" in graph["interop.zoo"]  # the scan sees the zoo's own arrow
    users = sorted(m for m, deps in graph.items() if "interop.e5" in deps and not m.startswith("interop."))
    assert users == []


def test_commands_import_no_models_and_no_nn():
    for p in (PKG / "commands").glob("*.py"):
        assert imported_rooms(p) & {"models", "nn"} == set(), p.name


RANK_ZERO = {"main_first", "is_main", "agree"}  # train.distributed's: who runs a step


def rank_zero_calls(path: Path) -> list[str]:
    """Where `path` calls or imports train.distributed's rank-0 words itself."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            out += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if a.name in RANK_ZERO]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in RANK_ZERO:
                out.append(f"{path.name}:{node.lineno} calls {name}")
    return out


def test_no_task_says_who_runs_a_step():
    """Rank 0 below the tasks (issue 52, item 5): a task's pipeline says what a step is
    (train/once.py: `build_once`, `decide_once`, `write_once`), never who runs it: no file of
    tasks/ calls or imports `main_first`, `is_main` or `agree`."""
    scanned = [p for p in files() if room(p) == "tasks"]
    assert PKG / "tasks" / "classify" / "pipeline.py" in scanned
    assert [m for p in scanned for m in rank_zero_calls(p)] == []


def test_the_scanners_see_what_they_look_for(tmp_path):
    code = ('from ..models import x\nfrom ..tasks.faces import face\nimport scratchformer.nn.quant\n'
            'def f(t, cls):\n    if t == "classify": pass\n    if t in ("lm", "mlm"): pass\n'
            '    if cls.__name__ == "X": pass\n    k = {"classify": 1, "translate": 2}\n'
            '    importlib.import_module(f"scratchformer.tasks.{t}.inspect")\n'
            '    p.add_argument("--task", choices=["classify", "lm"])\n'
            '    p.add_argument("--format", choices=("onnx",))\n')
    path = tmp_path / "scratchformer" / "commands" / "planted.py"
    path.parent.mkdir(parents=True)
    path.write_text(code)
    ranked = tmp_path / "ranked.py"
    ranked.write_text("from ...train.distributed import is_main, world_size\nagree = 0.5\n"
                      "if is_main(): pass\nself.dist.agree(lambda: 1)\nx = main_first(f)\n")
    assert rank_zero_calls(ranked) == ["ranked.py:1 imports is_main", "ranked.py:3 calls is_main",
                                       "ranked.py:4 calls agree", "ranked.py:5 calls main_first"]
    global PKG
    saved, PKG = PKG, tmp_path / "scratchformer"
    try:
        assert imported_rooms(path) == {"models", "tasks", "nn"}
        found = name_tests(path)
        by_line = {}
        for m in found:
            by_line.setdefault(int(m.split(" ", 1)[0].split(":")[1]), set()).add(m.split(" ", 1)[1])
        assert by_line == {
            5: {"compares with a task name"}, 6: {"compares with a task name", "a list of task names"},
            7: {"tests a __name__"}, 8: {"a dict keyed by task names"}, 9: {"imports a module by a formatted name"},
            10: {"a list of task names", "a choice list of tasks, formats or engines"},
            11: {"a choice list of tasks, formats or engines"}}
    finally:
        PKG = saved
