"""The data split that makes parity hold: ranks × micro-steps cover exactly one global batch;
and the stream drawn on demand is the one a materialised dataset behind DistributedSampler and a
DataLoader gave (the old way), batch for batch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.schema import DataConfig, InputSpec, ModelConfig
from launcher.train.data import FileTokens, MicroBatches, SyntheticTokens, build_dataset


def _steps(dataset, micro, dp, accum, steps):
    """Per optimizer step, the set of sample rows every rank's micro-batches cover."""
    its = [MicroBatches(dataset, micro, dp, rank, seed=0) for rank in range(dp)]
    out = []
    for _ in range(steps):
        rows = [next(it) for it in its for _ in range(accum)]
        out.append(sorted(tuple(r.tolist()) for b in rows for r in b))
    return out


class Materialised(Dataset):
    """The old way: every sample of the trial generated up front and held (steps × global batch
    rows on every rank)."""

    def __init__(self, dataset: Dataset) -> None:
        self.tokens = torch.stack([dataset[i] for i in range(len(dataset))])  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tokens[i]


def old_stream(dataset: Dataset, micro: int, dp: int, rank: int, seed: int, count: int) -> list[torch.Tensor]:
    """The first `count` micro-batches as the old loader drew them: DistributedSampler + DataLoader,
    set_epoch at each epoch's end."""
    sampler = DistributedSampler(dataset, num_replicas=dp, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=micro, sampler=sampler, drop_last=True)
    out, epoch, it = [], 0, iter(loader)
    while len(out) < count:
        try:
            out.append(next(it))
        except StopIteration:
            epoch += 1
            sampler.set_epoch(epoch)
            it = iter(loader)
    return out


def test_synthetic_is_deterministic_and_learnable_shape():
    a, b = SyntheticTokens(16, 8, 50, seed=3), SyntheticTokens(16, 8, 50, seed=3)
    rows = torch.stack([a[i] for i in range(16)])
    assert torch.equal(rows, torch.stack([b[i] for i in range(16)]))
    assert rows.shape == (16, 9) and int(rows.max()) < 50
    # Most steps follow the rule token[t+1] = token[t] + stride (mod vocab): learnable.
    steps = (rows[:, 1:] - rows[:, :-1]) % 50
    assert (steps == steps.mode(dim=1).values[:, None]).float().mean() > 0.7


def test_a_synthetic_sample_depends_on_seed_and_index_only():
    """Not on how many samples the trial has (steps × global batch grows with the world size)."""
    small, large = SyntheticTokens(16, 32, 50, seed=3), SyntheticTokens(100_000, 32, 50, seed=3)
    assert all(torch.equal(small[i], large[i]) for i in range(16))
    assert not torch.equal(small[0], SyntheticTokens(16, 32, 50, seed=4)[0])
    with pytest.raises(IndexError):
        small[16]


@pytest.mark.parametrize("micro,dp", [(8, 1), (4, 2), (2, 4), (3, 2)])
def test_batch_k_on_demand_equals_batch_k_of_the_materialised_way(micro, dp):
    """Every rank's k-th micro-batch, across epoch ends (48 samples: a few micro-batches per
    epoch), is the one the old DistributedSampler + DataLoader over a materialised dataset gave."""
    ds = SyntheticTokens(48, 16, 50, seed=7)
    held = Materialised(ds)
    for rank in range(dp):
        on_demand = MicroBatches(ds, micro, dp, rank, seed=7)
        for k, old in enumerate(old_stream(held, micro, dp, rank, seed=7, count=20)):
            assert torch.equal(next(on_demand), old), (rank, k)


def test_every_split_of_a_global_batch_sees_the_same_samples():
    ds = SyntheticTokens(64, 8, 50, seed=0)
    reference = _steps(ds, micro=8, dp=1, accum=1, steps=4)
    assert _steps(ds, micro=4, dp=2, accum=1, steps=4) == reference
    assert _steps(ds, micro=2, dp=1, accum=4, steps=4) == reference
    assert _steps(ds, micro=2, dp=2, accum=2, steps=4) == reference


def test_file_tokens_windows(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(25, dtype="<u2").tofile(path)
    ds = FileTokens(path, "uint16", seq_len=8)
    assert len(ds) == 3  # (25 − 1) // 8
    assert ds[1].tolist() == list(range(8, 17))
    assert ds[1].dtype == torch.int64


class Counting(Dataset):
    """A dataset that counts its reads (a resumed run must not load the samples it skips)."""

    def __init__(self, n: int) -> None:
        self.n, self.reads = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        self.reads += 1
        return {"x": torch.full((2,), float(i)), "target": torch.tensor(i)}


@pytest.mark.parametrize("micro,dp,k", [(4, 1, 3), (2, 2, 7), (3, 2, 11), (4, 1, 24)])
def test_resuming_at_k_gives_the_uninterrupted_runs_samples_without_reading_the_skipped(micro, dp, k):
    """26 samples: an epoch is a few micro-batches, so k crosses epoch ends (k=24: exactly
    at one); each rank's stream after skip(k) is the uninterrupted stream from its k-th batch."""
    for rank in range(dp):
        straight = MicroBatches(Counting(26), micro, dp, rank, seed=5)
        expected = [next(straight) for _ in range(k + 6)][k:]
        resumed_data = Counting(26)
        resumed = MicroBatches(resumed_data, micro, dp, rank, seed=5)
        resumed.skip(k)
        assert resumed_data.reads == 0
        for want in expected:
            got = next(resumed)
            assert got.keys() == want.keys() and all(torch.equal(got[key], want[key]) for key in want)
        assert resumed_data.reads == 6 * micro


PAIRS = """
import torch


class Pairs(torch.utils.data.Dataset):
    def __init__(self, n, width):
        self.n, self.width = n, width

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((self.width,), float(i)), i % 10


def make(n, width):
    return Pairs(n, width)


def wrong_keys(n):
    return [{"pixels": torch.zeros(3), "target": 0}] * n


def not_a_dataset():
    return 42


def rows(n, seq_len):
    return [torch.arange(seq_len + 1) + i for i in range(n)]
"""

IMAGE_MODEL = ModelConfig(
    _target_="mymodels.build",
    inputs={"image": InputSpec(shape=[3])},
    target=InputSpec(shape=[], dtype="int64", high=10),
)


@pytest.fixture
def mydata(tmp_path, monkeypatch):
    (tmp_path / "mydata.py").write_text(PAIRS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return lambda target, **kwargs: DataConfig(kind="dataset", _target_=f"mydata.{target}", kwargs=kwargs)


def test_a_user_dataset_of_pairs_reaches_the_model_as_dicts_sharded_over_ranks(mydata):
    """(image, label) items keyed by model.inputs then `target`; 2 ranks × micro 2 take the
    samples one rank with micro 4 takes, as DistributedSampler shards them."""
    ds = build_dataset(mydata("make", n=12, width=3), IMAGE_MODEL, num_samples=999, seed=0)
    assert len(ds) == 12  # the user's dataset as it is, not steps × global batch
    one = next(MicroBatches(ds, 4, 1, 0, seed=0))
    assert one["image"].shape == (4, 3) and one["target"].dtype == torch.int64
    assert torch.equal(one["target"], one["image"][:, 0].long() % 10)  # each label stays with its image
    halves = [next(MicroBatches(ds, 2, 2, rank, seed=0)) for rank in range(2)]
    assert sorted(torch.cat([h["target"] for h in halves]).tolist()) == sorted(one["target"].tolist())


def test_a_user_dataset_of_the_wrong_shape_fails_at_start_up_with_the_keys_it_needs(mydata):
    with pytest.raises(
        ValueError, match=r"item 0 is \['pixels', 'target'\], but the model takes \['image', 'target'\]"
    ):
        build_dataset(mydata("wrong_keys", n=4), IMAGE_MODEL, num_samples=8, seed=0)
    no_target = dataclasses.replace(IMAGE_MODEL, target=None)
    with pytest.raises(ValueError, match=r"item 0 is a tuple of 2 entries, but the model takes \['image'\]"):
        build_dataset(mydata("make", n=4, width=3), no_target, num_samples=8, seed=0)
    with pytest.raises(TypeError, match="returned int, not a map-style Dataset"):
        build_dataset(mydata("not_a_dataset"), IMAGE_MODEL, num_samples=8, seed=0)
    with pytest.raises(
        ValueError, match=r"item 0 is \(9,\), but model=tiny_gpt takes rows of model.seq_len\+1=65 token"
    ):
        build_dataset(mydata("rows", n=4, seq_len=8), ModelConfig(), num_samples=8, seed=0)


def test_data_dataset_composes_with_kwargs_beside_target_and_feeds_a_built_in_model_token_rows(mydata):
    """`data=dataset data._target_=… data.n=…`: the loader moves n and seq_len into data.kwargs;
    a built-in model's items are token rows, stacked as synthetic ones are."""
    cfg = compose_config(["data=dataset", "data._target_=mydata.rows", "data.n=10", "data.seq_len=64"])
    assert (cfg.data.kind, cfg.data._target_, cfg.data.kwargs) == ("dataset", "mydata.rows", {"n": 10, "seq_len": 64})
    batch = next(MicroBatches(build_dataset(cfg.data, cfg.model, num_samples=1, seed=0), 4, 1, 0, seed=0))
    assert batch.shape == (4, 65) and sorted((batch[:, 1] - batch[:, 0]).tolist()) == [1, 1, 1, 1]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["data=dataset"],
            "data=dataset needs data._target_, a callable returning a map-style Dataset; "
            "set e.g. data._target_=mypkg.data.make",
        ),
        (
            ["data._target_=mydata.rows"],
            "data._target_=mydata.rows (or data.kwargs) is set but data=synthetic ignores it; add data=dataset",
        ),
    ],
)
def test_a_dataset_without_its_target_or_a_target_without_data_dataset_is_one_line(overrides, message):
    with pytest.raises(ConfigError) as raised:
        compose_config(overrides)
    assert str(raised.value) == message
