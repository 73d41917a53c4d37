"""matrix.yaml parsed once into typed, validated objects; every later stage takes these.

Validation order: YAML syntax (duplicate keys rejected), then the JSON Schema, then the
rules a schema cannot express (duplicate entry names, image references, and what the
kernel family records of families.py allow: family names, head dims, dtypes, a memory
estimate for every family an entry builds). Every failure is one ConfigError naming the
path in the file and how to fix it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import yaml

from .errors import ConfigError
from .families import FAMILIES
from .memory import HOST

SCHEMA_PATH = Path(__file__).with_name("matrix.schema.json")

# JSON Schema counts 64.0 as an integer; YAML has distinct ints and floats, and a float head
# dim would pass the family records (64.0 == 64) and reach generated C++ as "64.0".
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, instance: type(instance) is int),
)


@dataclass(frozen=True)
class BaseImage:
    pull: str | None
    suite: str
    components: tuple[str, ...]


@dataclass(frozen=True)
class ImageSpec:
    name: str
    dockerfile: str
    cuda: str
    base: BaseImage
    ptxas: str | None = None  # a sources.lock.yaml pin whose bin/ptxas replaces the toolkit's


@dataclass(frozen=True)
class KernelSet:
    family: str
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]


@dataclass(frozen=True)
class Entry:
    name: str
    cuda: str
    image: ImageSpec
    archs: tuple[str, ...]
    flags: tuple[str, ...]
    memory_estimates_gb: dict
    kernels: tuple[KernelSet, ...]


@dataclass(frozen=True)
class Matrix:
    name: str
    description: str
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Config:
    path: Path
    matrices: dict
    images: dict

    def matrix(self, name: str) -> Matrix:
        if name not in self.matrices:
            known = ", ".join(sorted(self.matrices))
            raise ConfigError(
                f"unknown matrix '{name}' in {self.path.name}",
                fix=f"use one of: {known}",
            )
        return self.matrices[name]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_unique_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"line {key_node.start_mark.line + 1}: key '{key}' appears twice in one mapping",
                fix="remove or rename one of them",
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _json_path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _schema_error_message(error: jsonschema.ValidationError) -> tuple[str, str]:
    where = _json_path(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        fix = f"remove {', '.join(extra)}; allowed keys here: {', '.join(allowed)}" if allowed else "remove it"
        return f"{where}: unknown key {', '.join(repr(e) for e in extra)}", fix
    if error.validator == "required":
        return f"{where}: {error.message}", "add the missing key"
    if error.validator == "type":
        expected = "a whole number without a decimal point" if error.validator_value == "integer" else (
            f"a {error.validator_value}")
        return f"{where}: {error.instance!r} is not of type {error.validator_value}", f"write {expected} here"
    if error.validator == "enum":
        choices = ", ".join(repr(v) for v in error.validator_value)
        return f"{where}: {error.instance!r} is not allowed", f"use one of: {choices}"
    if error.validator == "contains":
        return f"{where}: must contain {error.validator_value.get('const')!r}", (
            "this library is built for Hopper; keep sm_90a in every entry's archs"
        )
    if error.validator == "not":
        return f"{where}: {error.instance!r} is not allowed here", (
            "architectures belong in 'archs', not in 'flags'"
        )
    return f"{where}: {error.message}", "see flashbuild/matrix.schema.json for the expected form"


def _load_yaml(path: Path):
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", fix="run from the repository root") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path.name}: {where}invalid YAML ({problem})", fix="correct the YAML syntax") from None


def _yaml_word(value) -> str:
    """A matrix value as YAML spells it (true/false, numbers, quoted strings)."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _check_families(raw: dict, where: str) -> None:
    """An entry's kernel sets against the family records, and its memory estimates."""
    for index, kernel_set in enumerate(raw["kernels"]):
        at = f"{where}.kernels[{index}]"
        name = kernel_set["family"]
        if name not in FAMILIES:
            raise ConfigError(f"{at}.family: {name!r} is not allowed",
                              fix=f"use one of: {', '.join(repr(f) for f in FAMILIES)} (flashbuild/families.py)")
        family = FAMILIES[name]
        for key, allowed in (("head_dims", family.head_dims), ("dtypes", family.dtypes), ("causal", family.causal)):
            for position, value in enumerate(kernel_set[key]):
                if value not in allowed:
                    raise ConfigError(f"{at}.{key}[{position}]: {_yaml_word(value)} is not allowed",
                                      fix=f"{name} exists for {key} {', '.join(map(_yaml_word, allowed))}")
    estimates = raw["memory_estimates_gb"]
    unknown = sorted(set(estimates) - set(FAMILIES) - {HOST})
    if unknown:
        raise ConfigError(f"{where}.memory_estimates_gb: unknown key {', '.join(map(repr, unknown))}",
                          fix=f"use '{HOST}' or a family name: {', '.join(FAMILIES)}")
    missing = sorted({k["family"] for k in raw["kernels"]} - set(estimates))
    if missing:
        raise ConfigError(f"{where}.memory_estimates_gb: no estimate for {', '.join(missing)}",
                          fix="add the peak GiB one nvcc process of that family needs "
                              "(build/tu-stats.json holds the peaks earlier builds measured)")


def load_config(path: Path | str) -> Config:
    path = Path(path)
    document = _load_yaml(path)
    schema = json.loads(SCHEMA_PATH.read_text())
    validator = _Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        # The deepest error is the most specific; report it, and say how many more exist.
        error = max(errors, key=lambda e: len(e.absolute_path))
        message, fix = _schema_error_message(error)
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ConfigError(f"{path.name}: {message}{more}", fix=fix)

    images = {
        name: ImageSpec(
            name=name,
            dockerfile=spec["dockerfile"],
            cuda=spec["cuda"],
            base=BaseImage(
                pull=spec["base"].get("pull"),
                suite=spec["base"]["suite"],
                components=tuple(spec["base"]["components"]),
            ),
            ptxas=spec.get("ptxas"),
        )
        for name, spec in document["images"].items()
    }
    matrices = {}
    seen: dict[str, str] = {}  # entry name -> matrix; names are artifact folders, so unique
    for matrix_name, spec in document["matrices"].items():
        entries = []
        for index, raw in enumerate(spec["entries"]):
            where = f"{path.name}: matrices.{matrix_name}.entries[{index}]"
            if raw["name"] in seen:
                raise ConfigError(
                    f"{where}.name: duplicate entry name '{raw['name']}' (also in matrix '{seen[raw['name']]}')",
                    fix="give every entry its own name: it names the folder artifacts/<version>/<entry>/",
                )
            seen[raw["name"]] = matrix_name
            if raw["image"] not in images:
                raise ConfigError(
                    f"{where}.image: unknown image '{raw['image']}'",
                    fix=f"use one of the images defined under 'images': {', '.join(sorted(images))}",
                )
            image = images[raw["image"]]
            if image.cuda != raw["cuda"]:
                raise ConfigError(
                    f"{where}.cuda: entry asks for CUDA {raw['cuda']} but image '{image.name}' has CUDA {image.cuda}",
                    fix="make the entry's 'cuda' match its image",
                )
            _check_families(raw, where)
            kernel_sets = tuple(
                KernelSet(
                    family=k["family"],
                    head_dims=tuple(k["head_dims"]),
                    dtypes=tuple(k["dtypes"]),
                    causal=tuple(k["causal"]),
                )
                for k in raw["kernels"]
            )
            entries.append(
                Entry(
                    name=raw["name"],
                    cuda=raw["cuda"],
                    image=image,
                    archs=tuple(raw["archs"]),
                    flags=tuple(raw["flags"]),
                    memory_estimates_gb=dict(raw["memory_estimates_gb"]),
                    kernels=kernel_sets,
                )
            )
        matrices[matrix_name] = Matrix(
            name=matrix_name, description=spec.get("description", ""), entries=tuple(entries)
        )
    return Config(path=path, matrices=matrices, images=images)
