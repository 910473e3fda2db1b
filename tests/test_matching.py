"""Qualified-name matching: aliases resolve, traps do not fire, values flowing into
devices are found where they are written."""

from __future__ import annotations


def test_import_aliases_resolve_to_qualified_names(scan_source):
    found = scan_source(
        """
        import torch
        import torch.backends.cudnn as cudnn
        from torch.cuda.amp import GradScaler as Scaler, autocast
        from torch import cuda
        import torch.distributed as dist
        from torch.distributed import ReduceOp

        cudnn.benchmark = True
        scaler = Scaler()
        with autocast():
            pass
        cuda.synchronize()
        dist.all_reduce(t, op=ReduceOp.AVG)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        """
    )
    assert found == [
        (9, "TPB001"),
        (10, "TPA006"),  # the aliased GradScaler; unused, so it only "scales"
        (11, "TPA001"),
        (13, "TPT001"),
        (14, "TPN003"),
        (15, "TPN003"),
    ]


def test_unimported_lookalikes_are_not_matched(scan_source):
    found = scan_source(
        """
        class cudnn:
            benchmark = False

        cudnn.benchmark = True          # a local class, not torch.backends.cudnn
        torch_cuda = object()
        """
    )
    assert found == []


def test_comments_docstrings_and_unrelated_names_are_not_findings(scan_source):
    found = scan_source(
        '''
        """Train on cuda. Call torch.cuda.synchronize() and .cuda() as needed."""
        import torch

        # model.cuda()  -- old code, torch.cuda.synchronize()
        cuda_version = "12.1"
        gpu_count = 4
        message = "accelerate cuda kernels later"


        def use_cuda_kernels(flag):
            """Returns whether cuda kernels were requested: "cuda"."""
            return flag
        '''
    )
    assert found == []


def test_device_values_in_argparse_defaults_config_dicts_and_module_constants(scan_source):
    found = scan_source(
        """
        import argparse
        import torch
        import torch.distributed as dist

        DEVICE = "cuda:0"
        CONFIG = {"device": "cuda", "backend": "nccl", "lr": 0.1}
        BACKEND = "nccl"
        parser = argparse.ArgumentParser()
        parser.add_argument("--device", default="cuda")
        parser.add_argument("--dist-backend", default="nccl")
        x = torch.zeros(2, device=CONFIG["device"])
        dist.init_process_group(backend=BACKEND)
        """
    )
    assert found == [
        (6, "TPD002"),
        (7, "TPD002"),
        (7, "TPN002"),
        (8, "TPN002"),
        (10, "TPD002"),
        (11, "TPN002"),
    ]


def test_built_device_strings_and_integer_ids(scan_source):
    found = scan_source(
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        rank = 0
        a = torch.device(f"cuda:{rank}")
        b = torch.device("cuda:{}".format(rank))
        c = torch.device("cuda:%d" % rank)
        d = torch.device("cuda:" + str(rank))
        model = model.to(local_rank)
        model = DDP(model, device_ids=[rank], output_device=rank)
        t = t.cuda(rank)
        """
    )
    assert found == [
        (6, "TPD003"),
        (7, "TPD003"),
        (8, "TPD003"),
        (9, "TPD003"),
        (10, "TPD005"),
        (11, "TPD005"),
        (11, "TPD005"),
        (12, "TPD001"),
    ]


def test_specific_rules_supersede_the_strings_inside_them(scan_source):
    found = scan_source(
        """
        import torch
        import torch.distributed as dist

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pass
        dist.init_process_group("nccl")
        state = torch.load("x.pt", map_location="cuda:0")
        if device.type == "cuda":
            pass
        """
    )
    assert found == [(5, "TPD007"), (6, "TPA003"), (8, "TPN001"), (9, "TPS001"), (10, "TPD016")]


def test_training_loop_host_syncs_only_inside_loops_that_call_backward(scan_source):
    found = scan_source(
        """
        import torch

        for batch in loader:
            loss = model(batch).sum()
            scaler.scale(loss).backward()
            total += loss.item()
            print(f"loss {loss}")
            history.append(loss.cpu())

        for batch in loader:          # evaluation: no backward, no finding
            acc += model(batch).sum().item()
            print(acc)
        """
    )
    assert found == [(7, "TPH001"), (8, "TPH003"), (9, "TPH002")]


def test_host_syncs_that_do_not_run_every_step_are_not_reported(scan_source):
    found = scan_source(
        """
        import torch

        def train(model, loader, args):
            for epoch in range(args.epochs):
                for i, batch in enumerate(loader):
                    loss = model(batch).sum()
                    loss.backward()
                    if i % args.print_freq == 0:
                        print(loss.item())
                        print(f"loss {loss}")
                    if (step + 1) % args.log_interval == 0 and rank == 0:
                        log(loss.cpu())
                    with torch.no_grad():
                        acc = model(batch).argmax().item()
                    per_step = loss.item()
                print("epoch", loss.item())
                print("epoch", loss)
                model.eval()
                for batch in val_loader:
                    total += model(batch).sum().item()
        """
    )
    # only the unguarded one in the inner loop: the logging interval, the no_grad block,
    # the end of the epoch and the validation loop run once in a while, not every step
    assert found == [(16, "TPH001")]


def test_a_sync_in_the_else_of_a_logging_interval_still_runs_every_step(scan_source):
    found = scan_source(
        """
        for i, batch in enumerate(loader):
            loss = model(batch).sum()
            loss.backward()
            if i % 10 == 0:
                pass
            else:
                total += loss.item()
        """
    )
    assert found == [(8, "TPH001")]


def test_unknown_torch_cuda_api_falls_back_to_the_catch_all(scan_source):
    found = scan_source(
        """
        import torch

        torch.cuda.synchronize()
        torch.cuda.jiterator._create_jit_fn("x")
        torch.cuda.utilization()
        """
    )
    assert found == [(4, "TPT001"), (5, "TPD099"), (6, "TPK018")]


def test_target_filter_hides_rules_the_target_does_not_need(scan_source):
    source = """
        import torch
        torch.backends.cudnn.benchmark = True
        x = torch.zeros(3, dtype=torch.float64)
        """
    assert scan_source(source) == [(3, "TPB001"), (4, "TPF001")]
    assert scan_source(source, target="accelerator") == []
    assert scan_source(source, target="tpu") == [(3, "TPB001"), (4, "TPF001")]


def test_fallback_never_claims_a_name_that_an_unselected_rule_covers(scan_source):
    source = """
        import torch
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cuda.cufft_plan_cache.max_size = 32
        """
    assert scan_source(source) == [(3, "TPB002"), (4, "TPB004")]
    assert scan_source(source, select=("TPB004",)) == [(4, "TPB004")]


def test_target_scope_rules_report_only_for_their_target(scan_source):
    source = """
        import torch

        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
        """
    assert scan_source(source) == []
    assert scan_source(source, target="tpu") == []
    assert scan_source(source, target="xla") == [(4, "TPH005")]


def test_map_location_is_read_by_keyword_or_second_position(scan_source):
    """``kw_contains``'s ``pos`` (data, not a case in the matcher): torch.load's second
    positional argument is its map_location."""
    found = scan_source(
        """
        import torch

        a = torch.load("a.pt", "cuda")
        b = torch.load("b.pt", map_location="cuda:1")
        c = torch.load("c.pt", "cpu")
        d = torch.load("d.pt", map_location="cpu")
        """
    )
    assert [c for _, c in found if c.startswith("TPS")] == ["TPS001", "TPS001"]
    assert [line for line, c in found if c == "TPS001"] == [4, 5]
