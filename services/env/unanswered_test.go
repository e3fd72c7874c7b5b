package env_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
)

// verboseFamily is alfworld whose openings describe the room in more bytes than any reply can carry; it
// counts the instances it opens and those closed.
type verboseFamily struct {
	task.Family
	opened, closed atomic.Int64
}

type verboseInstance struct {
	task.Instance
	f *verboseFamily
}

func (f *verboseFamily) New(split string, seed uint64) (task.Instance, error) {
	inst, err := f.Family.New(split, seed)
	if err != nil {
		return nil, err
	}
	f.opened.Add(1)
	return &verboseInstance{Instance: inst, f: f}, nil
}

func (i *verboseInstance) Start() task.Opening {
	o := i.Instance.Start()
	o.Observation = strings.Repeat("a very long room. ", proto.MaxEnvBatchBytes/16)
	return o
}

func (i *verboseInstance) Close() error {
	i.f.closed.Add(1)
	return nil
}

// A session whose start reply cannot be sent (here too large for any reply) is closed at once and
// counted: its caller gets an error and never learns the session's id, so it would otherwise hold one of
// the host's slots until it idled out.
func TestSessionWhoseStartReplyIsNotSentIsClosed(t *testing.T) {
	bothWays(t, testSessionWhoseStartReplyIsNotSentIsClosed)
}

func testSessionWhoseStartReplyIsNotSentIsClosed(t *testing.T, f *fixture) {
	fam := &verboseFamily{Family: alfworld.New()}
	h := f.startHost(t, env.Config{CallTimeout: 5 * time.Second}, task.Registry{alfworld.Name: fam})
	c := f.client(t)
	if rep, err := c.Start(testCtx(t), startReq(1)); err == nil {
		t.Fatalf("start answered with session %s, want an error: the opening is larger than a reply", rep.SessionID)
	}
	if fam.opened.Load() == 0 {
		t.Fatal("the host opened no instance")
	}
	eventually(t, 10*time.Second, "every opened instance closed", func() bool {
		return fam.closed.Load() == fam.opened.Load() && h.Active() == 0
	})
	if got, want := h.Unanswered(), fam.opened.Load(); got != want {
		t.Fatalf("unanswered = %d, want %d (one per opened session)", got, want)
	}
}
