package env_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
)

// panickingFamily is alfworld whose steps panic once release is closed; its instances report each close.
type panickingFamily struct {
	task.Family
	release chan struct{}
	entered chan struct{}
	closed  chan struct{}
}

type panickingInstance struct {
	task.Instance
	f *panickingFamily
}

func (f *panickingFamily) New(split string, seed uint64) (task.Instance, error) {
	inst, err := f.Family.New(split, seed)
	return &panickingInstance{Instance: inst, f: f}, err
}

func (i *panickingInstance) Step(proto.ToolCall) task.Result {
	i.f.entered <- struct{}{}
	<-i.f.release
	panic("game bug")
}

func (i *panickingInstance) Close() error {
	i.f.closed <- struct{}{}
	return nil
}

func newPanickingFamily() *panickingFamily {
	return &panickingFamily{Family: alfworld.New(), release: make(chan struct{}), entered: make(chan struct{}, 8), closed: make(chan struct{}, 8)}
}

// A step whose game panics fails with ErrInternal and leaves the session closable: cancelling it releases
// the instance.
func TestPanickingStepLeavesTheSessionClosable(t *testing.T) {
	bothWays(t, testPanickingStepLeavesTheSessionClosable)
}

func testPanickingStepLeavesTheSessionClosable(t *testing.T, f *fixture) {
	fam := newPanickingFamily()
	close(fam.release)
	h := f.startHost(t, env.Config{CallTimeout: 5 * time.Second}, task.Registry{alfworld.Name: fam})
	c := f.client(t)
	ctx := testCtx(t)
	rep, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, rep.Admissible[0]); !errors.Is(err, proto.ErrInternal) {
		t.Fatalf("panicking step: %v, want ErrInternal", err)
	}
	if err := c.Cancel(ctx, rep.HostID, rep.SessionID); err != nil {
		t.Fatal(err)
	}
	wait(t, fam.closed, "the instance of the cancelled session to close")
	if h.Active() != 0 {
		t.Fatalf("active = %d after cancel", h.Active())
	}
}

// A session cancelled while its timed-out step still runs is closed when that step ends, even if the game
// panics.
func TestCancelWhileTimedOutStepPanics(t *testing.T) {
	bothWays(t, testCancelWhileTimedOutStepPanics)
}

func testCancelWhileTimedOutStepPanics(t *testing.T, f *fixture) {
	fam := newPanickingFamily()
	f.startHost(t, env.Config{CallTimeout: 50 * time.Millisecond}, task.Registry{alfworld.Name: fam})
	c := f.client(t)
	ctx := testCtx(t)
	rep, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, rep.Admissible[0]); !errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("slow step: %v, want ErrEnvTimeout", err)
	}
	wait(t, fam.entered, "the slow step to start")
	if err := c.Cancel(ctx, rep.HostID, rep.SessionID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fam.closed:
		t.Fatal("the instance closed while its step still ran")
	default:
	}
	close(fam.release) // the late step panics
	wait(t, fam.closed, "the instance to close once its step ended")
}

// startPanicFamily is alfworld whose instance generation panics.
type startPanicFamily struct{ task.Family }

func (startPanicFamily) New(string, uint64) (task.Instance, error) { panic("generator bug") }

// A start whose instance generation panics fails with ErrInternal, counted, and the host serves on.
func TestPanickingStartFailsThatStartOnly(t *testing.T) {
	bothWays(t, testPanickingStartFailsThatStartOnly)
}

func testPanickingStartFailsThatStartOnly(t *testing.T, f *fixture) {
	h := f.startHost(t, env.Config{CallTimeout: 5 * time.Second}, task.Registry{alfworld.Name: startPanicFamily{alfworld.New()}, "other": alfworld.New()})
	c := f.client(t)
	ctx := testCtx(t)
	if _, err := c.Start(ctx, startReq(1)); !errors.Is(err, proto.ErrInternal) {
		t.Fatalf("panicking start: %v, want ErrInternal", err)
	}
	other := startReq(2)
	other.Task = "other"
	if _, err := c.Start(ctx, other); err != nil {
		t.Fatalf("a start after the panic: %v", err)
	}
	if h.Active() != 1 {
		t.Fatalf("active = %d, want the one good session", h.Active())
	}
}
