"""The modeled process's state lives in sessions: a check, a test or a script sees only its own tagged events,
device time, profiles and stream switches, and nothing is reset by hand."""

from __future__ import annotations

import threading

import pytest
import torch

from pytest_npufuse import torch_npu, torchair
from pytest_npufuse.errors import ScopeError
from pytest_npufuse.pipeline import chain
from pytest_npufuse.pipeline.backend import compile_model, current_profile, modeled_run
from pytest_npufuse.pytest.sessions import RUN_SESSION
from pytest_npufuse.session import Scope, Session, SessionKey, current_session, in_session
from pytest_npufuse.simulate.clock import device_clock
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.target.running import state_running_target


class _Scoped(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("sp1", ""):
            return torch.relu(x @ x) + 1


@in_session
def _check() -> tuple[float, float, torch_npu.profiler.profile]:
    """One library check that leaves its state behind: a tagged event, device time and a profile still in
    progress. Returns the device clock when it started and when it ended, and its profile."""
    started_at = device_clock()()
    torchair.ops.npu_create_tagged_event("e1")
    compiled, _ = compile_model(_Scoped(), target="a3")
    torch_npu.profiler.profile().start()
    prof = torch_npu.profiler.profile()
    prof.start()
    compiled(torch.ones(8, 8))
    return started_at, device_clock()(), prof


def test_two_consecutive_checks_do_not_see_each_others_state():
    first_start, first_end, first_profile = _check()
    second_start, second_end, second_profile = _check()  # the same tag again: the first's event went with it
    assert first_start == second_start == 0.0 and first_end == second_end > 0.0
    assert len(first_profile.calls) == len(second_profile.calls) == 1  # the first's profile missed the second's call


def test_a_check_sees_the_tagged_events_of_its_caller_and_its_own_go_with_it():
    event = torchair.ops.npu_create_tagged_event("outer")

    @in_session
    def inner() -> None:
        torchair.ops.npu_tagged_event_record(event)  # the caller's event is in use inside the check
        torchair.ops.npu_create_tagged_event("inner")
        with pytest.raises(ScopeError) as exc:  # already in use
            torchair.ops.npu_create_tagged_event("outer")
        assert (exc.value.op, exc.value.argument) == ("npu_create_tagged_event", "tag")

    inner()
    inner()
    torchair.ops.npu_create_tagged_event("inner")


def test_compare_runs_in_a_session_of_its_own_inside_the_callers(monkeypatch):
    seen: list[Session] = []
    model_program = chain.model_program

    def spied(*args, **kwargs):
        seen.append(current_session())
        return model_program(*args, **kwargs)

    monkeypatch.setattr(chain, "model_program", spied)
    caller = current_session()
    chain.compare(_Scoped(), torch.ones(8, 8))
    chain.compare(_Scoped(), torch.ones(8, 8))
    assert [session.parent for session in seen] == [caller] * 4
    assert seen[0] is seen[1] and seen[2] is seen[3] and seen[0] is not seen[2]
    assert current_session() is caller


def test_a_stream_switch_left_in_effect_does_not_reach_the_next_session(shim):
    with Session(current_session()):
        torch.npu.set_stream(torch.npu.Stream())
        assert torch.npu.current_stream() != torch.npu.default_stream()
    assert torch.npu.current_stream() == torch.npu.default_stream()


def test_a_script_run_starts_a_modeled_process_and_its_tests_inherit_its_target():
    torchair.ops.npu_create_tagged_event("before")
    with modeled_run(load_profile("a2")):
        torchair.ops.npu_create_tagged_event("before")  # a fresh process: no tagged events yet
        with Session(current_session()):
            assert current_profile().name == "a2"
            state_running_target(load_profile("a3"))
            assert current_profile().name == "a3"
        assert current_profile().name == "a2"


def test_process_state_is_shared_by_every_session_and_own_state_is_not():
    shared = SessionKey("test: shared", list, Scope.PROCESS)
    own = SessionKey("test: own", list)
    current_session()[shared].append(1)
    current_session()[own].append(1)
    with Session():
        assert current_session()[shared] == [1] and current_session()[own] == []


def test_a_worker_thread_sees_the_session_of_the_check_that_started_it():
    seen: list[Session] = []
    with Session(current_session()) as check:
        worker = threading.Thread(target=lambda: seen.append(current_session()))
        worker.start()
        worker.join()
    assert seen == [check]


def test_closing_a_session_closes_those_left_open_inside_it():
    outer = Session(current_session()).open()
    Session(outer).open()
    outer.close()
    assert current_session() is not outer and outer not in _open_chain()


def _open_chain() -> list[Session]:
    chain_ = []
    session: Session | None = current_session()
    while session is not None:
        chain_.append(session)
        session = session.parent
    return chain_


ISOLATION = '''
import pytest
import torch
from pytest_npufuse import torch_npu, torchair
from pytest_npufuse.pytest.sessions import RUN_SESSION
from pytest_npufuse.session import current_session
from pytest_npufuse.simulate.clock import device_clock

LASTING = torchair.ops.npu_create_tagged_event("lasting")


@pytest.mark.parametrize("round", [1, 2, 3])
def test_each_test_starts_clean(request, round):
    assert current_session().parent is request.config.stash[RUN_SESSION]
    assert device_clock()() == 0.0
    torchair.ops.npu_tagged_event_record(LASTING)  # made at import: it lasts for the run
    torchair.ops.npu_create_tagged_event("mine")  # a duplicate only within one test
    with pytest.raises(Exception, match="already in use"):
        torchair.ops.npu_create_tagged_event("lasting")
    assert torch.npu.current_stream() == torch.npu.default_stream()
    torch.npu.set_stream(torch.npu.Stream())  # left in effect
    torch_npu.profiler.profile().start()  # left in progress
    device_clock().run(1.0)
'''


def test_each_test_of_a_run_has_its_own_session_inside_the_runs(pytester, shim):
    """As an xdist worker runs many tests in one process: parametrized and repeated tests each start clean."""
    pytester.makepyfile(test_isolation=ISOLATION)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=3)


def test_the_run_session_is_on_config_stash_and_this_test_runs_inside_it(request):
    assert current_session().parent is request.config.stash[RUN_SESSION]
    assert request.config.stash[RUN_SESSION].process and not current_session().process
