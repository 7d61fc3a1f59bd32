"""The dev cluster's container runtime, its pure parts: config text (plugstack.conf, enroot's drop-in,
slurm.conf's PlugStackConfig line), the parsers the build reads its inputs with, the `--containers`
flag and its record. The real runtime on the running cluster: tests/slurm/test_container_runtime.py."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from launcher.slurm import devcluster
from launcher.slurm.devcluster import cluster as cluster_verb
from launcher.slurm.devcluster import conf, containers, files
from launcher.slurm.devcluster.__main__ import main as devcluster_main
from launcher.slurm.devcluster.state import State

ROOT = Path("/var/tmp/launcher-devcluster")
CL = containers.container_layout(ROOT)
BASE = f"{ROOT}/containers"


def test_plugstack_loads_pyxis_from_the_cache_with_job_scope_and_squashfuse():
    assert containers.plugstack_text(CL).splitlines()[1:] == [
        f"required {BASE}/pyxis/lib/slurm/spank_pyxis.so runtime_path={BASE}/var/pyxis "
        "container_scope=job use_squashfuse=true"
    ]
    assert CL.plugstack == ROOT / "etc" / "plugstack.conf"


def test_enroot_keeps_one_folder_per_node_in_the_cache():
    lines = containers.enroot_conf_text(CL).splitlines()[1:]
    assert lines == [
        f"ENROOT_RUNTIME_PATH {BASE}/var/$(hostname)/runtime",
        f"ENROOT_CACHE_PATH {BASE}/var/$(hostname)/cache",
        f"ENROOT_DATA_PATH {BASE}/var/$(hostname)/data",
        f"ENROOT_TEMP_PATH {BASE}/var/$(hostname)/tmp",
        "ENROOT_SQUASH_OPTIONS -comp lz4",
        "ENROOT_MOUNT_HOME no",
    ]
    assert CL.enroot_dropin == ROOT / "containers/enroot/etc/enroot/enroot.conf.d/devcluster.conf"
    assert CL.data("n2") == ROOT / "containers/var/n2/data"


def test_daemons_find_enroot_first_on_their_path():
    assert containers.daemon_path(CL, "/usr/sbin:/usr/bin") == f"{BASE}/enroot/bin:/usr/sbin:/usr/bin"


def test_image_path_is_in_the_cluster_folder(tmp_path):
    assert containers.image_path(ROOT) == ROOT / "containers/images/bookworm-python-torch.sqsh"
    assert CL.image_json == ROOT / "containers/images/bookworm-python-torch.json"
    assert containers.image_info(tmp_path) is None and containers.enabled(tmp_path) is False


def test_slurm_conf_names_plugstack_only_with_containers(tmp_path):
    layout = conf.Layout(root=ROOT)
    plain = conf.slurm_conf_text(layout, conf.node_names(2))
    assert not any(line.startswith("PlugStackConfig") for line in plain.splitlines())
    with_pyxis = conf.slurm_conf_text(layout, conf.node_names(2), plugstack=CL.plugstack).splitlines()
    assert f"PlugStackConfig={ROOT}/etc/plugstack.conf" in with_pyxis
    assert sorted(set(with_pyxis) - set(plain.splitlines())) == [f"PlugStackConfig={ROOT}/etc/plugstack.conf"]


def test_the_config_files_gain_plugstack_with_containers():
    layout = conf.Layout(root=ROOT)
    off = files.configs(layout, conf.node_names(1), "pw", 2)
    on = files.configs(layout, conf.node_names(1), "pw", 2, with_containers=True)
    assert set(on) - set(off) == {CL.plugstack}
    assert on[CL.plugstack] == (containers.plugstack_text(CL), 0o644)


@pytest.mark.parametrize(
    "sources, mirror",
    [
        (
            [
                "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
                "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
                "Components: main\n"
            ],
            "http://deb.debian.org/debian",
        ),
        (
            [
                "# a comment\ndeb http://security.debian.org/debian-security bookworm-security main\n"
                "deb [signed-by=/k.gpg] http://mirror.example/debian/ bookworm main contrib\n"
            ],
            "http://mirror.example/debian",
        ),
        (["deb-src http://deb.debian.org/debian bookworm main\n", "deb http://m/debian bookworm contrib\n"], None),
        (
            [
                "Types: deb\nURIs: http://deb.debian.org/debian-security\n"
                "Suites: bookworm-security\nComponents: main\n",
                "Types: deb-src deb\nURIs: http://other/debian\nSuites: bookworm\nComponents: main\n",
            ],
            "http://other/debian",
        ),
    ],
)
def test_debootstrap_mirror_from_apt_sources(sources, mirror):
    assert containers.mirror_of(sources) == mirror


def test_versions_the_build_records():
    assert containers.slurm_version("#define SLURM_VERSION_NUMBER 0x160508\n") == "22.05.8"
    assert containers.slurm_version('#define SLURM_VERSION_STRING "23.11.4"\n') == "23.11.4"
    assert containers.slurm_version("nothing") is None
    assert containers.makefile_version("VERSION       := 4.1.2\n", "VERSION") == "4.1.2"
    assert containers.makefile_version("PYXIS_VER ?= 0.24.0\n", "PYXIS_VER") == "0.24.0"
    assert containers.makefile_version("XVERSION := 1\n", "VERSION") is None


def test_the_vendored_sources_name_the_versions_the_status_reports():
    src = containers.THIRD_PARTY
    assert containers.makefile_version((src / "pyxis" / "Makefile").read_text(), "PYXIS_VER") == "0.24.0"
    assert containers.makefile_version((src / "enroot" / "Makefile").read_text(), "VERSION") == "4.1.2"
    assert (src / "pyxis" / "LICENSE").is_file() and (src / "enroot" / "LICENSE").is_file()


@pytest.mark.parametrize("root", ["/tmp/a b", "relative/dir", "/x/$(id)", "/x;y"])
def test_a_cluster_folder_enroot_cannot_take_is_one_clear_line(root, monkeypatch, capsys):
    with pytest.raises(ValueError, match="--containers needs a cluster folder path of letters"):
        containers.check_root(Path(root) if root.startswith("/") else root)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert devcluster_main(["up", "--containers", "--root", root]) == 2
    err = capsys.readouterr().err
    assert err.startswith("launcher: error: --containers needs a cluster folder path") and err.count("\n") == 1


def test_containers_flag_on_off_or_keep():
    p = argparse.ArgumentParser()
    cluster_verb.add_arguments(p)
    assert p.parse_args(["up"]).containers is None
    assert p.parse_args(["up", "--containers"]).containers is True
    assert p.parse_args(["up", "--no-containers"]).containers is False


def test_the_record_keeps_containers():
    st = State(containers=True)
    assert State.from_json(st.to_json()).containers is True
    assert State.from_json({}).containers is False


def test_status_says_whether_containers_are_on(tmp_path):
    cl = containers.container_layout(tmp_path)
    assert containers.describe(cl, False) == [
        "containers: off (`launcher cluster up --containers` adds pyxis + enroot and an image)"
    ]
    on = containers.describe(cl, True)
    assert on[1] == f"image: MISSING ({cl.image}); `launcher cluster up --containers` builds it"
    assert (
        devcluster.DevCluster(
            root=tmp_path, slurm_conf=tmp_path / "s", nodes=("n1",), partition="debug", gpus_per_node=2
        ).containers
        is False
    )


def test_off_removes_plugstack_which_slurm_reads_beside_slurm_conf_even_unnamed(tmp_path):
    layout = conf.Layout(root=tmp_path)
    for d in (layout.etc, layout.mysql_dir):
        d.mkdir(parents=True)
    plugstack = containers.ContainerLayout(layout=layout).plugstack
    nodes = conf.node_names(1)
    assert plugstack in files.write_configs(layout, nodes, 2, with_containers=True)
    assert plugstack.exists() and files.configs_current(layout, nodes, 2, with_containers=True)
    assert not files.configs_current(layout, nodes, 2)
    assert files.write_configs(layout, nodes, 2) == {layout.slurm_conf, plugstack}
    assert not plugstack.exists() and files.configs_current(layout, nodes, 2)
