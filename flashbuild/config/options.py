"""matrix.yaml parsed once into typed, validated objects; every later stage takes these.

Validation order: YAML syntax (duplicate keys rejected), then the JSON Schema, then the
rules a schema cannot express (duplicate entry names, image references, and what the
kernel family records of families.py allow: family names, head dims, dtypes, a memory
estimate for every family an entry builds). Every failure is one ConfigError naming the
line and path in the file and how to fix it; a mistake inside a YAML anchor that several
matrices share is named once, where the anchor is defined (yaml_source.py). An empty file,
or a folder in its place, is said to be one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from flashbuild.core import yaml_source
from flashbuild.core.errors import ConfigError
from flashbuild.config.families import FAMILIES, HOST

SCHEMA_PATH = Path(__file__).parent.parent / "resources" / "matrix.schema.json"

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
    compile_time_estimates: dict = field(default_factory=dict)  # group -> reference seconds per TU

    def matrix(self, name: str) -> Matrix:
        if name not in self.matrices:
            known = ", ".join(sorted(self.matrices))
            raise ConfigError(
                f"unknown matrix '{name}' in {self.path.name}",
                fix=f"use one of: {known}",
            )
        return self.matrices[name]


class _Problem(Exception):
    """A problem at a path in the document; load_config turns it into a ConfigError naming
    the line (and, in an anchor, where it is defined)."""

    def __init__(self, path, message: str, fix: str, key: str | None = None):
        super().__init__(message)
        self.path, self.message, self.fix, self.key = tuple(path), message, fix, key
        self.more = ""  # how many other problems the schema found


def _schema_problem(error: jsonschema.ValidationError) -> _Problem:
    path = error.absolute_path
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        fix = f"remove {', '.join(extra)}; allowed keys here: {', '.join(allowed)}" if allowed else "remove it"
        return _Problem(path, f"unknown key {', '.join(repr(e) for e in extra)}", fix, key=extra[0] if extra else None)
    if error.validator == "required":
        return _Problem(path, error.message, "add the missing key")
    if error.validator == "type":
        expected = "a whole number without a decimal point" if error.validator_value == "integer" else (
            f"a {error.validator_value}")
        return _Problem(path, f"{error.instance!r} is not of type {error.validator_value}", f"write {expected} here")
    if error.validator == "enum":
        choices = ", ".join(repr(v) for v in error.validator_value)
        return _Problem(path, f"{error.instance!r} is not allowed", f"use one of: {choices}")
    if error.validator == "contains":
        return _Problem(path, f"must contain {error.validator_value.get('const')!r}",
                        "this library is built for Hopper; keep sm_90a in every entry's archs")
    if error.validator == "not":
        return _Problem(path, f"{error.instance!r} is not allowed here",
                        "architectures belong in 'archs', not in 'flags'")
    return _Problem(path, error.message, "see flashbuild/resources/matrix.schema.json for the expected form")


def _yaml_word(value) -> str:
    """A matrix value as YAML spells it (true/false, numbers, quoted strings)."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _check_families(raw: dict, where: tuple) -> None:
    """An entry's kernel sets against the family records, and its memory estimates."""
    for index, kernel_set in enumerate(raw["kernels"]):
        at = (*where, "kernels", index)
        name = kernel_set["family"]
        if name not in FAMILIES:
            raise _Problem((*at, "family"), f"{name!r} is not allowed",
                           f"use one of: {', '.join(repr(f) for f in FAMILIES)} (flashbuild/config/families.py)")
        family = FAMILIES[name]
        for key, allowed in (("head_dims", family.head_dims), ("dtypes", family.dtypes), ("causal", family.causal)):
            for position, value in enumerate(kernel_set[key]):
                if value not in allowed:
                    raise _Problem((*at, key, position), f"{_yaml_word(value)} is not allowed",
                                   f"{name} exists for {key} {', '.join(map(_yaml_word, allowed))}")
    estimates = raw["memory_estimates_gb"]
    unknown = sorted(set(estimates) - set(FAMILIES) - {HOST})
    if unknown:
        raise _Problem((*where, "memory_estimates_gb"), f"unknown key {', '.join(map(repr, unknown))}",
                       f"use '{HOST}' or a family name: {', '.join(FAMILIES)}", key=unknown[0])
    missing = sorted({k["family"] for k in raw["kernels"]} - set(estimates))
    if missing:
        raise _Problem((*where, "memory_estimates_gb"), f"no estimate for {', '.join(missing)}",
                       "add the peak GiB one nvcc process of that family needs "
                       "(build/tu-stats.json holds the peaks earlier builds measured)")


_EXPECTED = "a mapping of schema_version, images and matrices (flashbuild/resources/matrix.schema.json)"


def load_config(path: Path | str) -> Config:
    path = Path(path)
    document = yaml_source.load(path)
    if document.data is None:
        raise ConfigError(f"{path} is empty (or only comments)",
                          fix=f"it must hold {_EXPECTED}; restore the committed one with `git checkout {path.name}`")
    if not isinstance(document.data, dict):
        kind = "sequence" if isinstance(document.data, list) else "single value"
        raise ConfigError(f"{path.name}: the top level is a {kind}, not a mapping", fix=f"it must hold {_EXPECTED}")
    try:
        _validate(document)
        return _config(path, document.data)
    except _Problem as problem:
        where, note = document.where(problem.path, problem.key)
        raise ConfigError(f"{path.name}: {where}: {problem.message}{note}{problem.more}", fix=problem.fix) from None


def _validate(document: yaml_source.Document) -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    errors = list(_Validator(schema).iter_errors(document.data))
    if errors:
        # The deepest error is the most specific; report it, and say how many more exist.
        errors.sort(key=lambda e: (-len(e.absolute_path), list(map(str, e.absolute_path))))
        problem = _schema_problem(errors[0])
        # A node shared through an anchor fails once per use; count it once.
        distinct = {(document.where(e.absolute_path)[0], e.validator, e.message) for e in errors}
        if len(distinct) > 1:
            problem.more = f" (and {len(distinct) - 1} more problem(s))"
        raise problem


def _config(path: Path, document: dict) -> Config:
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
            where = ("matrices", matrix_name, "entries", index)
            if raw["name"] in seen:
                raise _Problem((*where, "name"),
                               f"duplicate entry name '{raw['name']}' (also in matrix '{seen[raw['name']]}')",
                               "give every entry its own name: it names the folder artifacts/<version>/<entry>/")
            seen[raw["name"]] = matrix_name
            if raw["image"] not in images:
                raise _Problem((*where, "image"), f"unknown image '{raw['image']}'",
                               f"use one of the images defined under 'images': {', '.join(sorted(images))}")
            image = images[raw["image"]]
            if image.cuda != raw["cuda"]:
                raise _Problem((*where, "cuda"),
                               f"entry asks for CUDA {raw['cuda']} but image '{image.name}' has CUDA {image.cuda}",
                               "make the entry's 'cuda' match its image")
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
    estimates = document.get("compile_time_estimates_s", {})
    unknown = sorted(set(estimates) - set(FAMILIES) - {HOST})
    if unknown:
        raise _Problem(("compile_time_estimates_s",), f"unknown key {', '.join(map(repr, unknown))}",
                       f"use '{HOST}' or a family name: {', '.join(FAMILIES)}", key=unknown[0])
    return Config(path=path, matrices=matrices, images=images, compile_time_estimates=dict(estimates))
