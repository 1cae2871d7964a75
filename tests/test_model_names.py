"""No module outside plant/ (and the configs) asks which plant model it holds: the
PlantModel carries the traits (its diagnostics, metrics, correction, tick, offline run,
analyses), so a user's model gets what the built-in ones get."""
import ast
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = ("plant", "configs")          # where a model may be named
NOT_PACKAGE = ("tests", "bench", "examples", "docs", "build")


def model_names() -> set[str]:
    """The names of the plant models hilrig registers (entry-point group hilrig.plants)."""
    return {ep.name for ep in entry_points(group="hilrig.plants")
            if ep.value.startswith("hilrig.")}


def named_models(source: str, names: set[str]) -> list[str]:
    """Where ``source`` names a model: a string equal to a model's name, a model id
    constant (MODEL_*) of plant.layout, a comparison with a plant's ``.model``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in names:
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, (ast.Name, ast.alias)):
            name = node.id if isinstance(node, ast.Name) else node.name
            if name.startswith("MODEL_"):
                found.append(f"line {getattr(node, 'lineno', '?')}: {name}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "model" for s in sides):
                found.append(f"line {node.lineno}: a comparison with .model")
    return found


def package_files() -> list[Path]:
    files = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0] in ALLOWED + NOT_PACKAGE or "__pycache__" in parts or parts[0].startswith("."):
            continue
        files.append(path)
    return files


def test_the_scanner_finds_each_way_of_naming_a_model():
    names = {"rrr3", "serial_arm"}
    source = ('from hilrig.plant.layout import MODEL_RRR3\n'
              'if cfg.plant.model == "rrr3":\n    pass\n'
              'x = plant.model != 2\n'
              'doc = "the 3RRR (plant.model = rrr3) in prose is fine"\n')
    found = named_models(source, names)
    assert sorted(found) == ["line 1: MODEL_RRR3", "line 2: 'rrr3'",
                             "line 2: a comparison with .model",
                             "line 4: a comparison with .model"], found


def test_no_model_name_outside_plant_and_configs():
    names = model_names()
    assert {"serial_arm", "rrr3", "flex_chain", "flex_rp"} <= names
    files = package_files()
    assert any(f.parts[-2] == "rt" for f in files) and any(f.parts[-2] == "campaign" for f in files)
    offenders = {str(f.relative_to(ROOT)): hits for f in files
                 if (hits := named_models(f.read_text(), names))}
    assert not offenders, offenders
