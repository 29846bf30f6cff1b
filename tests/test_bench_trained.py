"""The benchmark's workloads from networks in training (snn_ipu.bench.trained): the
problem holds the trained network's own weights, biases and test batch, every peer runs
it as our reference backend does (biases included), and the run folder's copy is reused
only for the very same training settings."""

import pytest
import torch
import torch.nn.functional as F

from snn_ipu.bench import summary
from snn_ipu.bench.networks import OursNet, TorchLoopNet
from snn_ipu.bench.trained import cache_path, train_config, trained_problem

# randman shaped like a tiny SHD: 24 channels, 4 classes, one spike per channel
TINY = dict(sizes=(24, 16, 16, 4), T=12, B=6,
            train=dict(data="randman", randman_inputs=24, randman_classes=4,
                       randman_samples_per_class=8, epochs=2, batch_size=8, lr=1e-2))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    return folder, trained_problem("tiny", TINY, 3, "reference", folder, log=lambda m: None)


def test_trained_problem_is_the_trained_network(trained):
    folder, problem = trained
    config = train_config(TINY, 3, "reference")
    assert cache_path("tiny", config, folder).is_file()
    assert problem["training"]["epoch"] == 2 and problem["training"]["cached"] is None
    x, y = problem["x"], problem["y"]
    assert x.shape == (12, 6, 24) and y.shape == (6,)
    # randman: each input channel fires exactly once per sample
    assert torch.equal(x.sum(0), torch.ones(6, 24))
    # trained: the weights left the initial draw, the biases left zero
    torch.manual_seed(3)
    from snn_ipu.training import build_model

    initial = build_model(config, 24, 4)
    for layer, w, b in zip(initial, problem["w0"], problem["biases"]):
        assert not torch.equal(layer.weight.detach(), w)
        assert b.abs().max() > 0
    assert problem["gains"] == [1.0, 1.0, 1.0]


def test_peers_run_the_trained_network_as_the_reference(trained):
    _, problem = trained
    ref = OursNet(problem, "reference", None, 1e-5, "fused")
    out = ref.forward()
    F.cross_entropy(out.spike_counts(), ref.y).backward()
    loop = TorchLoopNet(problem, 1e-5, "fused")
    dense = loop.forward()
    F.cross_entropy(dense.sum(0), loop.y).backward()
    assert out.to_dense().sum() > 0
    assert torch.equal(dense.detach(), out.to_dense().detach())
    for fc, layer in zip(loop.fcs, ref.layers):
        for a, e in ((fc.weight.grad, layer.weight.grad), (fc.bias.grad, layer.bias.grad)):
            assert e.abs().max() > 0
            assert (a - e).abs().max() <= 1e-4 * e.abs().max()


def test_the_run_folders_copy_is_reused_for_the_same_settings(trained):
    folder, problem = trained
    again = trained_problem("tiny", TINY, 3, "reference", folder, log=lambda m: None)
    assert again["training"]["cached"] == str(cache_path("tiny", train_config(TINY, 3,
                                                                              "reference"),
                                                         folder))
    for a, b in zip(again["w0"] + again["biases"], problem["w0"] + problem["biases"]):
        assert torch.equal(a, b)
    assert torch.equal(again["x"], problem["x"]) and torch.equal(again["y"], problem["y"])
    # another T or seed is another network
    other = dict(TINY, T=13)
    assert cache_path("tiny", train_config(other, 3, "reference"), folder) != \
        cache_path("tiny", train_config(TINY, 3, "reference"), folder)
    assert cache_path("tiny", train_config(TINY, 4, "reference"), folder) != \
        cache_path("tiny", train_config(TINY, 3, "reference"), folder)


def test_the_copy_reused_with_another_batch_times_that_batch(trained):
    """The copy is keyed by the training's settings, which leave out the timed batch B:
    reused with another B, the problem holds B samples (the first B test samples, as a
    new run would take), not the B it was saved with."""
    folder, problem = trained
    for b in (4, 8):
        other = trained_problem("tiny", dict(TINY, B=b), 3, "reference", folder,
                                log=lambda m: None)
        assert other["B"] == b and other["x"].shape == (12, b, 24) and other["y"].shape == (b,)
        n = min(b, 6)
        assert torch.equal(other["x"][:, :n], problem["x"][:, :n])
        assert torch.equal(other["y"][:n], problem["y"][:n])
        for a, w in zip(other["w0"], problem["w0"]):
            assert torch.equal(a, w)
    with pytest.raises(ValueError, match="--batch 9: the task's test set has 8 samples"):
        trained_problem("tiny", dict(TINY, B=9), 3, "reference", folder, log=lambda m: None)


def test_a_batch_larger_than_the_test_set_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--batch 500: the task's test set has 8 samples"):
        trained_problem("tiny", dict(TINY, B=500), 3, "reference", tmp_path,
                        log=lambda m: None)


def test_summary_tables_with_a_trained_row():
    """A trained config has one row whatever the activities; its entries per step are
    the sparse step's lists, per layer."""
    entries = [{"spikes": 12.0, "eligible_only": 30.0, "capacity": 5},
               {"spikes": 8.0, "eligible_only": 4.0, "capacity": 3},
               {"spikes": 1.0, "eligible_only": 0.0, "capacity": 1}]
    res = {"emulator_sparse": {"median_s": 0.002, "timed": True,
                               "entries_per_step": entries},
           "emulator_exact": {"median_s": 0.004, "timed": True},
           "torch_loop": {"median_s": 0.02, "timed": True},
           "torch_compile_step": {"median_s": 0.016, "timed": True}}
    result = {"config": "digits-trained", "workload": "trained", "sizes": [128, 100, 40, 10],
              "T": 10, "B": 4, "rows": [{
                  "target_activity": None, "measured_hidden_activity": 0.05,
                  "training": {"epoch": 3, "test_acc": 0.8}, "results": res,
                  "speedup": {"emulator_sparse_vs_torch_compile_step": 8.0,
                              "emulator_exact_vs_torch_compile_step": 4.0}}]}
    lines = summary.markdown_table([result], [0.01, 0.1]).splitlines()
    assert len(lines) == 3
    assert lines[2] == ("| digits-trained: 128-100-40-10 (after 3 epochs, test accuracy 80%) "
                        "| 5.0% | 2.0 | 4.0 | - | 20.0 | 16.0 | - | - | - | "
                        "8.0x (torch.compile, per step) | 4.0x |")
    rows = summary.entries_table([result], [0.01]).splitlines()[2:]
    # layer 1: (12 + 30) listed of 4 x 100 neurons per step
    assert rows[0] == "| digits-trained | 5.0% | 1 (100) | 12 | 30 | 5 | 10.5% |"
    assert rows[1] == "| digits-trained | 5.0% | 2 (40) | 8 | 4 | 3 | 7.5% |"
    assert len(rows) == 3


def test_a_copy_cut_short_by_a_kill_is_trained_again(trained, tmp_path, monkeypatch):
    """A bench killed while it wrote the trained copy: the next run trains the network
    again (the very weights of the run that finished, ``trained``), instead of failing
    on a truncated file at the copy's path (a plain torch.save left one: every later
    run of the config raised "OSError: [Errno 22] Invalid argument")."""
    import io

    _, problem = trained
    real = torch.save

    def killed_mid_write(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real(obj, buffer)
        data = buffer.getvalue()
        if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
            with open(f, "wb") as out:
                out.write(data[:len(data) // 2])
        else:
            f.write(data[:len(data) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        trained_problem("tiny", TINY, 3, "reference", tmp_path, log=lambda m: None)
    monkeypatch.undo()
    path = cache_path("tiny", train_config(TINY, 3, "reference"), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], [path.name])
    # the copy a kill cut short before writes were atomic is trained again too
    lines = []
    for _ in range(2):
        again = trained_problem("tiny", TINY, 3, "reference", tmp_path, log=lines.append)
        assert again["training"]["cached"] is None
        for a, b in zip(again["w0"] + again["biases"], problem["w0"] + problem["biases"]):
            assert torch.equal(a, b)
        assert torch.equal(again["x"], problem["x"]) and torch.equal(again["y"], problem["y"])
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    assert any("is unreadable" in line and "training it again" in line for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
