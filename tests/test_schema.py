"""matrix.yaml validation: every bad input is one ConfigError (exit code 2) that names
where the problem is and how to fix it."""

import subprocess
import sys
import textwrap

import pytest
import yaml

from flashbuild.core.errors import ConfigError
from flashbuild.config.options import load_config


def good_document(repo):
    return yaml.safe_load((repo / "matrix.yaml").read_text())


def write(tmp_path, document) -> str:
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    return path


def entry(doc, matrix="minimal"):
    return doc["matrices"][matrix]["entries"][0]


def test_committed_matrix_is_valid(repo):
    config = load_config(repo / "matrix.yaml")
    assert set(config.matrices) == {"smoke", "minimal", "full", "hopper-check"}
    assert config.matrix("minimal").entries[0].archs == ("sm_90a",)


BAD = {
    "unknown key in entry": (lambda d: entry(d).update(colour="blue"),
                             "matrices.minimal.entries[0]: unknown key 'colour'"),
    "unknown top-level key": (lambda d: d.update(extras=1), "(top level): unknown key 'extras'"),
    "wrong type for archs": (lambda d: entry(d).update(archs="sm_90a"),
                             "matrices.minimal.entries[0].archs: 'sm_90a' is not of type array"),
    "wrong type for head dim": (lambda d: entry(d)["kernels"][0].update(head_dims=["128"]),
                                "matrices.minimal.entries[0].kernels[0].head_dims[0]: '128' is not of type integer"),
    "float head dim": (lambda d: entry(d)["kernels"][0].update(head_dims=[64.0]),
                       "matrices.minimal.entries[0].kernels[0].head_dims[0]: 64.0 is not of type integer"),
    "unsupported arch": (lambda d: entry(d).update(archs=["sm_90a", "sm_70"]),
                         "matrices.minimal.entries[0].archs[1]: 'sm_70' is not allowed"),
    "no hopper arch": (lambda d: entry(d).update(archs=["sm_80"]),
                       "matrices.minimal.entries[0].archs: must contain 'sm_90a'"),
    "arch smuggled into flags": (lambda d: entry(d).update(flags=["-O3", "-gencode=arch=compute_70,code=sm_70"]),
                                 "matrices.minimal.entries[0].flags[1]"),
    "missing key": (lambda d: entry(d).pop("cuda"), "matrices.minimal.entries[0]: 'cuda' is a required property"),
    "unknown image": (lambda d: entry(d).update(image="ubuntu"), "matrices.minimal.entries[0].image: unknown image"),
    "cuda mismatch": (lambda d: entry(d).update(cuda="12.8"), "entry asks for CUDA 12.8 but image"),
    "duplicate entry name": (lambda d: d["matrices"]["minimal"]["entries"].append(dict(entry(d))),
                             "duplicate entry name 'minimal-cuda12.4-sm90a'"),
    "duplicate entry name across matrices": (lambda d: entry(d, "full").update(name=entry(d)["name"]),
                                             "duplicate entry name 'minimal-cuda12.4-sm90a'"),
    "negative memory estimate": (lambda d: entry(d)["memory_estimates_gb"].update(fa2_fwd=-1),
                                 "memory_estimates_gb.fa2_fwd"),
    "memory estimate of no family": (lambda d: entry(d)["memory_estimates_gb"].update(fa3_fwd=2.0),
                                     "memory_estimates_gb: unknown key 'fa3_fwd'"),  # a shared anchor
    "compile time of no family": (lambda d: d["compile_time_estimates_s"].update(fa3_fwd=60),
                                  "compile_time_estimates_s: unknown key 'fa3_fwd'"),
    "zero compile time": (lambda d: d["compile_time_estimates_s"].update(fa2_fwd=0),
                          "compile_time_estimates_s.fa2_fwd"),
    "unknown family": (lambda d: entry(d)["kernels"][0].update(family="fa3_fwd"),
                       "matrices.minimal.entries[0].kernels[0].family: 'fa3_fwd' is not allowed"),
    "sm90 head dim without a kernel": (lambda d: entry(d)["kernels"][1].update(head_dims=[64, 160]),
                                       "matrices.minimal.entries[0].kernels[1].head_dims[1]: 160 is not allowed"),
    "fp8 head dim without a tile shape": (lambda d: entry(d)["kernels"][2].update(family="sm90_fp8_prefill",
                                                                                  head_dims=[112]),
                                          "matrices.minimal.entries[0].kernels[2].head_dims[0]: 112 is not allowed"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_matrix_is_one_clear_error(repo, tmp_path, case):
    mutate, expected = BAD[case]
    document = good_document(repo)
    mutate(document)
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, document))
    assert expected in raised.value.message
    assert raised.value.fix, "every config error says how to fix it"
    assert raised.value.exit_code == 2


def test_duplicate_yaml_key_is_rejected(tmp_path):
    text = textwrap.dedent("""\
        schema_version: 1
        images: {}
        matrices: {}
        matrices: {}
        """)
    with pytest.raises(ConfigError, match="line 4: key 'matrices' appears twice"):
        load_config(write(tmp_path, text))


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: invalid YAML"):
        load_config(write(tmp_path, "schema_version: 1\nimages: [unclosed\n"))


def test_unknown_matrix_lists_the_known_ones(repo):
    with pytest.raises(ConfigError) as raised:
        load_config(repo / "matrix.yaml").matrix("huge")
    assert "unknown matrix 'huge'" in raised.value.message
    assert "full, hopper-check, minimal, smoke" in raised.value.fix


def test_cli_reports_bad_matrix_without_traceback(repo):
    result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "huge", "--dry-run"],
                            cwd=repo, capture_output=True, text=True)
    assert result.returncode == 2
    assert "unknown matrix 'huge'" in result.stderr
    assert "fix: use one of" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_matrix_file_is_called_empty_and_the_fix_says_what_it_must_hold(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.message == f"{path} is empty (or only comments)"
    assert "schema_version, images and matrices" in raised.value.fix
    assert "git checkout matrix.yaml" in raised.value.fix


def test_a_matrix_file_whose_top_level_is_a_list_says_so(tmp_path):
    with pytest.raises(ConfigError, match="the top level is a sequence, not a mapping"):
        load_config(write(tmp_path, "- smoke\n- minimal\n"))


def test_a_folder_in_place_of_the_matrix_file_is_called_a_folder(tmp_path):
    folder = tmp_path / "matrix.yaml"
    folder.mkdir()
    with pytest.raises(ConfigError) as raised:
        load_config(folder)
    assert raised.value.message == f"{folder} is a folder, not a file"
    assert "repository root" not in raised.value.fix


def line_of(text, needle):
    return text.splitlines().index(needle) + 1


ANCHOR_MISTAKES = {
    # in the schema: a memory estimate of no memory
    "schema": ("  fa2_fwd_split: 5.0", "  fa2_fwd_split: -5.0",
               "memory_estimates_gb.fa2_fwd_split: -5.0 is less than or equal to the minimum of 0", "memory_estimates"),
    # in the family records: an estimate for a family that does not exist
    "families": ("  host: 1.5", "  host: 1.5\n  fa3_fwd: 2.0", "memory_estimates_gb: unknown key 'fa3_fwd'",
                 "memory_estimates"),
    "flags": ("    - -O3", "    - -O3\n    - -arch=sm_70", "flag_sets.hopper[1]: '-arch=sm_70' is not allowed here",
              "hopper_flags"),
}


@pytest.mark.parametrize("case", sorted(ANCHOR_MISTAKES))
def test_a_mistake_in_a_shared_anchor_is_reported_once_at_its_definition_with_the_matrices_using_it(
        repo, tmp_path, case):
    line, replacement, message, anchor = ANCHOR_MISTAKES[case]
    text = (repo / "matrix.yaml").read_text().replace(line + "\n", replacement + "\n", 1)
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text))
    matrices = ", ".join(yaml.safe_load(text)["matrices"])
    wrong_line = line_of(text, replacement.splitlines()[-1])
    assert raised.value.message == (f"matrix.yaml: line {wrong_line}: {message} "
                                    f"(in the anchor &{anchor}, used by matrices {matrices})")


def test_an_error_outside_any_anchor_names_its_own_line(repo, tmp_path):
    text = (repo / "matrix.yaml").read_text().replace("image: cuda12-debian-trixie", "image: ubuntu", 1)
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text))
    assert raised.value.message == (f"matrix.yaml: line {line_of(text, '        image: ubuntu')}: "
                                    "matrices.smoke.entries[0].image: unknown image 'ubuntu'")


LAUGHS = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x, x]"]
                   + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(8)]) + "\n"


def load_in_a_bounded_process(path):
    """load_config(path) in a child of at most 1 GiB and 60 s: (exit code, stderr). The loader
    that expanded aliases hung at 2 GB and growing (issue 31, finding 4)."""
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from flashbuild.core.errors import ConfigError\n"
            "from flashbuild.config.options import load_config\n"
            "try:\n"
            f"    load_config(__import__('pathlib').Path({str(path)!r}))\n"
            "except ConfigError as error:\n"
            "    sys.exit(f'{error.message} | {error.fix}')\n")
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return result.returncode, result.stderr


def test_a_billion_laughs_matrix_is_refused_at_once_by_its_size_after_aliases(tmp_path):
    path = write(tmp_path, LAUGHS)
    assert path.stat().st_size < 500
    code, stderr = load_in_a_bounded_process(path)
    assert code == 1 and "expands through its aliases to more than 100,000 nodes" in stderr, stderr


def test_a_matrix_file_of_megabytes_is_refused_before_parsing(tmp_path):
    path = write(tmp_path, "- 1\n" * 8_000_000)  # 32 MB
    code, stderr = load_in_a_bounded_process(path)
    assert code == 1 and "more than a build matrix's limit of 1,048,576" in stderr, stderr


def test_a_number_that_is_not_finite_is_refused_with_its_place(repo, tmp_path):
    text = (repo / "matrix.yaml").read_text().replace("fa2_fwd_split: 5.0", "fa2_fwd_split: .nan", 1)
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text))
    assert "memory_estimates_gb.fa2_fwd_split" in raised.value.message and "nan, not a finite number" in raised.value.message
    text = (repo / "matrix.yaml").read_text().replace("host: 1.5", "host: .inf", 1)
    with pytest.raises(ConfigError, match=r"memory_estimates_gb.host.*inf, not a finite number"):
        load_config(write(tmp_path, text))
