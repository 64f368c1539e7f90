"""Output-path and count checks for CLI flags: clear ValueErrors, nothing written outside the path."""

import argparse
import json
import os
import socket

import pytest

from agentrl.cli import main
from agentrl.cli.args import positive_int
from agentrl.preflight import check_input_file, check_output_file, check_port_free, prepare_output_dir
from agentrl.tasks import load_tasks, make_tasks, save_tasks


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    return f


def _unwritable_dir():
    """A directory path that cannot be created (sysfs refuses mkdir even for root)."""
    return "/sys/agentrl_qa_out" if os.path.isdir("/sys/kernel") else None


def test_prepare_output_dir_rejects_every_bad_kind(tmp_path, a_file, monkeypatch):
    with pytest.raises(ValueError, match="is a file; expected a directory"):
        prepare_output_dir(a_file)
    with pytest.raises(ValueError, match="is under the file"):
        prepare_output_dir(a_file / "sub" / "deeper")
    monkeypatch.chdir(tmp_path)
    for dots in (".", "..", "runs/..", ""):
        with pytest.raises(ValueError, match="current or a parent directory"):
            prepare_output_dir(dots)
    if _unwritable_dir():
        with pytest.raises(ValueError, match="cannot create the directory"):
            prepare_output_dir(_unwritable_dir())
    assert prepare_output_dir(tmp_path / "new" / "run").is_dir()


def test_check_output_file_rejects_every_bad_kind(tmp_path, a_file):
    with pytest.raises(ValueError, match="is a directory; expected a file path"):
        check_output_file(tmp_path)
    with pytest.raises(ValueError, match="is under the file"):
        check_output_file(a_file / "x.jsonl")
    with pytest.raises(ValueError, match="current or a parent directory"):
        check_output_file(".")
    if _unwritable_dir():
        with pytest.raises(ValueError, match="cannot create its directory"):
            check_output_file(_unwritable_dir() + "/x.jsonl")
    assert check_output_file(tmp_path / "d" / "x.jsonl") == tmp_path / "d" / "x.jsonl"
    assert (tmp_path / "d").is_dir() and not (tmp_path / "d" / "x.jsonl").exists()


def test_save_tasks_to_a_directory_leaves_no_temp_file(tmp_path):
    target = tmp_path / "outdir"
    target.mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        save_tasks(make_tasks(2), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outdir"] and not any(target.iterdir())


def test_tasks_export_bad_out_is_a_one_line_error(tmp_path, a_file, capsys):
    (tmp_path / "d").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    for bad, why in ((tmp_path / "d", "is a directory"), (a_file / "x.jsonl", "is under the file")):
        assert main(["tasks", "export", "--n", "2", "--out", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("agentrl tasks: error: --out") and why in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temp file left in the parent
    assert main(["tasks", "export", "--n", "2", "--out", str(tmp_path / "ok.jsonl")]) == 0
    assert len(load_tasks(tmp_path / "ok.jsonl")) == 2


def test_sft_bad_out_and_zero_tasks_are_clear_errors(tmp_path, a_file, capsys):
    for bad, why in ((a_file, "is a file"), (a_file / "sub", "is under the file"), (".", "current or a parent")):
        assert main(["sft", "--out", str(bad), "--device", "cpu", "--n-tasks", "1"]) == 2
        err = capsys.readouterr().err
        assert "agentrl sft: error: --out" in err and why in err
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    assert main(["sft", "--model", str(model_dir), "--out", str(model_dir), "--device", "cpu"]) == 2
    assert "is the --model folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["sft", "--n-tasks", "0", "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "expected an integer >= 1, got 0" in capsys.readouterr().err


def test_smoke_zero_episodes_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["smoke", "--episodes", "0"])
    assert e.value.code == 2 and "--episodes" in capsys.readouterr().err
    from agentrl.rollout.smoke import SmokeConfig, run_smoke

    with pytest.raises(ValueError, match="episodes >= 1"):
        run_smoke(SmokeConfig(episodes=0))


@pytest.fixture
def taken_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_check_port_free(taken_port, monkeypatch):
    with pytest.raises(ValueError, match=f"--port {taken_port} on 127.0.0.1 is in use"):
        check_port_free("127.0.0.1", taken_port)

    def unresolvable(host, *a, **k):  # a name the resolver does not know, without asking a resolver (no DNS here)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolvable)
    with pytest.raises(ValueError, match="--host 'no-such-host.invalid': not an address"):
        check_port_free("no-such-host.invalid", 8000)
    monkeypatch.undo()
    check_port_free("127.0.0.1", 0)  # any free port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    check_port_free("127.0.0.1", free)


def test_servers_and_clients_refuse_a_bad_address_in_one_line(taken_port, capsys):
    """A port in use is refused before the model or environment is built (and before 'listening' is
    printed); an --env-url nobody serves, or that is no URL, is one line, not a ConnectionError traceback."""
    for argv in (["serve-policy", "--model", "tiny-qwen3", "--device", "cpu", "--port", str(taken_port)],
                 ["serve", "--env", "edit-menu", "--port", str(taken_port)]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert f"error: --port {taken_port} on 127.0.0.1 is in use" in captured.err, argv
        assert "listening" not in captured.out + captured.err and "http://" not in captured.out
    with socket.socket() as closed:  # bound, never listening: connections are refused at once
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
        assert main(["eval", "--env-url", refused, "--models", "tiny-qwen3", "--eval-n", "1"]) == 2
    assert "cannot be reached (ConnectionError)" in capsys.readouterr().err
    for url, why in (("notaurl", "expected http://"), ("ftp://x", "expected http://")):
        assert main(["eval", "--env-url", url, "--models", "tiny-qwen3", "--eval-n", "1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("agentrl eval: error:") and why in err and "Traceback" not in err


def test_export_to_an_unwritable_place_names_the_file_not_a_temp_file(capsys):
    assert main(["tasks", "export", "--n", "2", "--out", "/proc/agentrl-tasks.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "task file '/proc/agentrl-tasks.jsonl': cannot write in '/proc'" in err and ".agentrl-tasks" not in err


@pytest.mark.parametrize("command", ["train", "eval"])
def test_run_out_in_an_unwritable_directory_is_one_line(command, capsys):
    """/proc passes os.access for root; the run's lock file beside --out is the first write."""
    assert main([command, "--out", "/proc/agentrl-run", "--device", "cpu", "--eval-size", "1", "--eval-n", "1"]) == 2
    err = capsys.readouterr().err
    assert f"agentrl {command}: error: --out '/proc/agentrl-run': cannot write in '/proc'" in err
    assert ".lock" not in err and "Traceback" not in err


def test_sft_save_jsonl_that_cannot_be_written_is_refused_before_anything_runs(tmp_path, a_file, capsys):
    for bad, why in ((tmp_path, "is a directory"), (a_file / "t.jsonl", "is under the file")):
        assert main(["sft", "--n-tasks", "1", "--device", "cpu", "--out", str(tmp_path / "o"),
                     "--save-jsonl", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"agentrl sft: error: --save-jsonl {str(bad)!r} {why}" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # refused before the model loaded or the output folder was made


def test_positive_int():
    assert positive_int("3") == 3
    for bad in ("0", "-1", "x", "2.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)


def test_archive_previous_moves_runs_aside_never_nesting(tmp_path):
    from agentrl.preflight import archive_previous

    out = tmp_path / "run"
    assert archive_previous(out, "results.json") is None  # nothing there
    out.mkdir()
    (out / "other.txt").write_text("x")
    assert archive_previous(out, "results.json") is None  # not a run's output: left alone
    moved = []
    for i in range(3):  # three archives within one second get distinct siblings
        out.mkdir(exist_ok=True)
        (out / "results.json").write_text(str(i))
        moved.append(archive_previous(out, "results.json"))
    assert len(set(moved)) == 3 and all(m.parent == tmp_path for m in moved)
    assert sorted((m / "results.json").read_text() for m in moved) == ["0", "1", "2"]
    assert not out.exists()


def test_check_input_file_tells_a_directory_from_a_missing_file(tmp_path):
    (tmp_path / "d.jsonl").mkdir()
    (tmp_path / "f.jsonl").write_text("{}\n")
    assert check_input_file(tmp_path / "f.jsonl", "task file") == tmp_path / "f.jsonl"
    with pytest.raises(ValueError, match=r"^task file '.*d.jsonl' is a directory; expected a JSONL file$"):
        check_input_file(tmp_path / "d.jsonl", "task file", "a JSONL file")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_input_file(tmp_path / "missing.jsonl", "task file")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_input_file(tmp_path / "dangling", "task file")


def test_input_files_given_a_directory_say_directory_not_missing(tmp_path, capsys):
    """--tasks DIR (train, eval, serve), sft --from-jsonl DIR and convert_gguf(DIR) all said 'does not exist'."""
    from agentrl.models.gguf import convert_gguf
    from agentrl.sft.data import load_trajectories

    d = tmp_path / "data.jsonl"
    d.mkdir()
    for argv in (["train", "--tasks", str(d), "--model", "tiny-qwen3", "--steps", "1", "--device", "cpu"],
                 ["eval", "--tasks", str(d), "--model", "tiny-qwen3", "--device", "cpu"],
                 ["serve", "--env", "edit-menu", "--tasks", str(d), "--port", "0"],
                 ["sft", "--from-jsonl", str(d), "--device", "cpu"]):
        assert main([*argv, *(["--out", str(tmp_path / "o")] if argv[0] != "serve" else [])]) == 2, argv
        err = capsys.readouterr().err
        assert "is a directory; expected a JSONL file" in err and "does not exist" not in err, (argv, err)
        assert "Traceback" not in err and err.count("\n") == 1, err
    with pytest.raises(ValueError, match="is a directory; expected a JSONL file of trajectory records"):
        load_trajectories(d)
    with pytest.raises(ValueError, match="GGUF file .* is a directory; expected a .gguf file"):
        convert_gguf(d, tmp_path / "out")
    assert not (tmp_path / "o").exists()


def test_user_json_nested_too_deeply_or_with_a_huge_integer_is_a_one_line_error_naming_the_file(tmp_path, capsys):
    """json.loads raises RecursionError for deep nesting (a traceback) and, for an integer over 4,300 digits, a
    ValueError that names no file and advises sys.set_int_max_str_digits(); every reader of user JSON says
    which file (and line) instead: task JSONL, SFT JSONL, a results file, a model's config.json, --config YAML."""
    from agentrl.preflight import loads_json

    deep, huge = "[" * 100_000 + "]" * 100_000, '{"id": ' + "9" * 5000 + "}"
    with pytest.raises(ValueError, match=r"^x\.json: JSON nested too deeply"):
        loads_json(deep, "x.json")
    with pytest.raises(ValueError, match=r"^x\.json: JSON holds an integer of more than \d+ digits$"):
        loads_json(huge, "x.json")
    with pytest.raises(json.JSONDecodeError):  # positioned errors stay the caller's to word
        loads_json("{", "x.json")
    model = tmp_path / "model"
    model.mkdir()
    for text, what in ((deep, "nested too deeply"), (huge, "integer of more than")):
        for name in ("t.jsonl", "r.json", "config.json", "c.yaml"):
            (tmp_path / name).write_text(text + "\n")
        (model / "config.json").write_text(text)
        for argv, file in ((["tasks", "check", "--file", str(tmp_path / "t.jsonl")], "t.jsonl:1"),
                           (["sft", "--from-jsonl", str(tmp_path / "t.jsonl"), "--device", "cpu",
                             "--out", str(tmp_path / "o")], "t.jsonl:1"),
                           (["report", str(tmp_path / "r.json")], "r.json"),
                           (["eval", "--model", str(model), "--device", "cpu", "--out", str(tmp_path / "o")],
                            "config.json")):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert file in err and what in err, (argv, err)
            assert "Traceback" not in err and err.count("\n") == 1, (argv, err)
    (tmp_path / "c.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SystemExit):
        main(["train", "--config", str(tmp_path / "c.yaml"), "--print-config"])
    err = capsys.readouterr().err
    assert "c.yaml: YAML nested too deeply" in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, flag", [
    (["env", "check", "bugfix", "--limit", "-1"], "--limit"),  # said "n must be >= 0, got -19"
    (["env", "check", "mbpp", "--limit", "0"], "--limit"),  # graded no task: "0/0 ... (ceiling nan)"
    (["env", "check", "mbpp", "--repeats", "0"], "--repeats"),
    (["env", "check", "mbpp", "--test-timeout-s", "nan"], "--test-timeout-s"),  # "cannot convert float NaN"
    (["env", "check", "mbpp", "--test-timeout-s", "0"], "--test-timeout-s"),  # 0: no per-test limit at all
    (["env", "check", "mbpp", "--test-timeout-s", "-2"], "--test-timeout-s"),
    (["tasks", "check", "--n", "2", "--show-problems", "-1"], "--show-problems"),  # "... and 1 more problems"
])
def test_check_commands_refuse_counts_and_limits_out_of_range_by_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {flag}: expected" in err and "Traceback" not in err, err


def test_input_paths_that_exist_but_are_no_regular_file_say_so(tmp_path, capsys):
    """/dev/zero as --config, a results file or --chat-template said 'no such file' / 'not found'."""
    for argv, said in ((["train", "--config", "/dev/zero", "--print-config"], "--config /dev/zero: not a regular file"),
                       (["report", "/dev/zero"], "/dev/zero is not a regular file; expected a results JSON file"),
                       (["eval", "--model", "tiny-qwen3", "--chat-template", "/dev/zero", "--device", "cpu",
                         "--out", str(tmp_path / "o")], "--chat-template '/dev/zero' is not a regular file")):
        try:
            rc = main(argv)
        except SystemExit as e:  # --config is read while parsing: argparse's error
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2 and said in err and "no such file" not in err and "not found" not in err, (argv, err)


@pytest.mark.parametrize("seed", [2**62, -(2**62), 10**26, True, 1.0, "3"])
def test_seeds_no_generator_takes_are_refused_before_anything_loads(seed):
    """A seed past torch's 64 bits used to reach torch.manual_seed after the model had loaded and end train,
    eval, sft and smoke with "Overflow when unpacking long long"; now each config names its field."""
    from agentrl.preflight import check_seed
    from agentrl.rl.config import RLConfig
    from agentrl.rollout.smoke import SmokeConfig
    from agentrl.sft.config import SFTConfig

    with pytest.raises(ValueError, match="x.seed: expected"):
        check_seed(seed, "x.seed")
    for make, name in ((lambda: RLConfig.from_flat(seed=seed), "RLConfig.seed"),
                       (lambda: SFTConfig(seed=seed), "SFTConfig.seed"),
                       (lambda: SmokeConfig(seed=seed), "SmokeConfig.seed")):
        with pytest.raises(ValueError, match=name.replace(".", r"\.")) as e:
            make()
        assert len(str(e.value)) < 200


def test_the_largest_seeds_still_run_and_the_cli_names_the_flag(capsys):
    from agentrl.preflight import check_seed

    assert check_seed(2**62 - 1, "s") == 2**62 - 1 and check_seed(-(2**62) + 1, "s") == -(2**62) + 1
    assert main(["train", "--seed", str(10**26), "--print-config"]) == 2
    assert "RLConfig.seed: expected a seed between" in capsys.readouterr().err


def test_writers_never_rename_over_a_device_fifo_or_link_to_one(tmp_path, capsys):
    """The atomic writers write beside a path and rename over it: `agentrl tasks export --out /dev/full` said
    "wrote 2 tasks to /dev/full" and left a regular file where the device was (as root). A FIFO, or a link to a
    device, is refused the same way, by every writer, before anything is written."""
    from agentrl.report.results import atomic_write_text

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    link = tmp_path / "null.jsonl"
    link.symlink_to(os.devnull)
    for path in (fifo, link):
        with pytest.raises(ValueError, match="not a regular file"):
            check_output_file(path, "--out")
        with pytest.raises(ValueError, match="not a regular file"):
            save_tasks(make_tasks(1), path)
        with pytest.raises(ValueError, match="not a regular file"):
            atomic_write_text(path, "x")
        assert main(["tasks", "export", "--n", "1", "--out", str(path)]) == 2
        assert "is not a regular file (a device, FIFO or socket)" in capsys.readouterr().err
    assert fifo.is_fifo() and link.is_symlink() and os.path.realpath(link) == os.devnull
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.jsonl", "null.jsonl"]  # no temp file left
    (tmp_path / "ok.jsonl").write_text("old")
    assert save_tasks(make_tasks(1), tmp_path / "ok.jsonl") == 1  # a regular file is still replaced


@pytest.mark.parametrize("port", [0, 18999])
def test_a_host_that_is_not_this_machines_names_the_host_not_the_port(port):
    """192.0.2.1 (TEST-NET-1, never local): the message said "--port N on HOST cannot be bound; pass another
    --port", and with --port 0 nothing was checked, so `agentrl serve` loaded its tasks and uvicorn logged a bind
    error."""
    with pytest.raises(ValueError, match=r"--host '192\.0\.2\.1': not an address of this machine") as e:
        check_port_free("192.0.2.1", port)
    assert "another --port" not in str(e.value)
    check_port_free("127.0.0.1", 0)  # port 0 on a local host: fine


def test_an_output_folder_whose_path_is_not_utf8_is_refused_before_anything_runs(tmp_path, capsys):
    """`agentrl sft --out $'runs/\\xff'` trained, then failed to save with "'utf-8' codec can't encode character
    '\\udcff'", leaving the folder: the run folder's path goes into its JSON files."""
    bad = str(tmp_path / "runs") + "/x\udcff"
    with pytest.raises(ValueError, match=r"--out '.*x\\udcff' is not UTF-8 text"):
        prepare_output_dir(bad)
    (tmp_path / "t.jsonl").write_text('{"prompt_ids": [1, 2], "completion_ids": [3], "policy_mask": [1]}\n')
    assert main(["sft", "--model", "demo-qwen3", "--from-jsonl", str(tmp_path / "t.jsonl"), "--out", bad]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
