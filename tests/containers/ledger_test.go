//go:build containers

package containers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// The ledger accounts for every episode the mesh produced, by id, from the durable records alone: the
// episodes stream (what rollout published), the batches and train streams (what the replay-buffer and the
// normalizer released) and the trainer's step events (which train batch each policy version applied).
//
// Every episode published to JETRL_EPISODES has exactly one fate:
//   - trained:     in exactly one train batch that the trainer applied, and admitted by the trainer's rule;
//   - masked:      an infrastructure failure (env host gone, timeout, rollout shut down): never batched;
//   - stale:       admitted more than eta versions before the version that would train it, dropped by the
//     replay-buffer (its group was released, or settled, past the bound) or by the trainer;
//   - small group: its group had fewer than minGroup usable (not masked) members, so GRPO has nothing to
//     compare it with; the replay-buffer settles the group without training it;
//   - pending:     still held by the replay-buffer at the end (a complete group waiting for enough others
//     to fill a batch), unacked in the replay-buffer's consumer;
//   - lost:        anything else: not trained and no recorded reason. Must be 0.
//
// duplicated counts episodes in more than one train batch or trained more than once. Must be 0.
// A train batch applied twice, a gap or repeat in the versions, an applied batch the train stream does not
// hold, or an episode in a batch that the episodes stream does not hold fail the ledger too.

// stamp is how the ledger prints a time.
const stamp = "15:04:05.000"

// Fates.
const (
	fateTrained = "trained"
	fateMasked  = "masked"
	fateStale   = "stale"
	fateSmall   = "small group"
	fatePending = "pending"
	fateLost    = "lost"
)

// epRec is what the ledger keeps of one published episode.
type epRec struct {
	id, group, rollout, host string
	failure                  string // why an infrastructure failure failed (shortened)
	groupSize                int
	infra                    bool
	startVersion             int64
	seq                      uint64
	at                       time.Time // stored in the episodes stream
	startedAt, finishedAt    time.Time
	staleAt                  string // the stage that dropped it as stale: replay-buffer or trainer
	inBatches                int    // train batches holding it
	trained                  int    // times the trainer's rule admitted it in an applied batch
	fate                     string
	why                      string // what the ledger knows of a lost episode
}

// batchRef is what the ledger keeps of the batch that released a group.
type batchRef struct {
	version int64     // the trainer's version at its release
	at      time.Time // when it was stored
}

type trainRec struct {
	id       string
	episodes []string
}

type ledger struct {
	eps         map[string]*epRec
	order       []*epRec // stream order
	republished int      // messages of the episodes stream repeating an id already stored
	groups      map[string][]*epRec
	train       map[string]*trainRec
	trainOrder  []string
	batchOf     map[string]batchRef // group id -> the batch holding it
	steps       []proto.TrainStep
	deadLetters int
	// replay-buffer consumer state at the end
	ackFloor      uint64
	numAckPending int

	problems []string
}

func (l *ledger) problem(format string, args ...any) {
	if len(l.problems) < 20 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// readStream hands every message of a stream, from sequence from (0: the first) up to its last sequence
// at the call, to fn.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, from uint64, fn func(seq uint64, at time.Time, data []byte) error) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || from > last {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 0 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from}
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		stop := context.AfterFunc(rctx, it.Stop)
		m, err := it.Next()
		stop()
		cancel()
		if err != nil {
			return fmt.Errorf("stream %s: read up to %d: %w", stream, last, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if err := fn(md.Sequence.Stream, md.Timestamp, m.Data()); err != nil {
			return fmt.Errorf("stream %s seq %d: %w", stream, md.Sequence.Stream, err)
		}
		if md.Sequence.Stream >= last {
			return nil
		}
	}
}

// readLedger reads the durable records of a drained mesh.
func readLedger(ctx context.Context, js jetstream.JetStream) (*ledger, error) {
	l := &ledger{eps: map[string]*epRec{}, groups: map[string][]*epRec{}, train: map[string]*trainRec{}, batchOf: map[string]batchRef{}}
	err := readStream(ctx, js, proto.StreamEpisodes, 0, func(seq uint64, at time.Time, data []byte) error {
		var ep proto.Episode
		if err := msgpack.Unmarshal(data, &ep); err != nil {
			return err
		}
		if _, dup := l.eps[ep.ID]; dup {
			l.republished++
			return nil
		}
		r := &epRec{id: ep.ID, group: ep.GroupID, rollout: ep.RolloutID, host: ep.HostID, groupSize: ep.GroupSize, failure: shorten(ep.Failure),
			infra: ep.InfraFailure, startVersion: ep.StartVersion, seq: seq, at: at,
			startedAt: time.Unix(0, ep.StartedAt), finishedAt: time.Unix(0, ep.FinishedAt)}
		l.eps[ep.ID] = r
		l.order = append(l.order, r)
		l.groups[ep.GroupID] = append(l.groups[ep.GroupID], r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readStream(ctx, js, proto.StreamBatches, 0, func(_ uint64, at time.Time, data []byte) error {
		var b proto.Batch
		if err := msgpack.Unmarshal(data, &b); err != nil {
			return err
		}
		for _, ep := range b.Episodes {
			l.batchOf[ep.GroupID] = batchRef{b.TrainerVersion, at}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readStream(ctx, js, proto.StreamTrain, 0, func(_ uint64, _ time.Time, data []byte) error {
		var tb proto.TrainBatch
		if err := msgpack.Unmarshal(data, &tb); err != nil {
			return err
		}
		if _, dup := l.train[tb.ID]; dup {
			return nil // the same batch stored twice (outside the dedup window) is applied once at most: checked below
		}
		r := &trainRec{id: tb.ID}
		for _, te := range tb.Episodes {
			r.episodes = append(r.episodes, te.Episode.ID)
		}
		l.train[tb.ID] = r
		l.trainOrder = append(l.trainOrder, tb.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readStream(ctx, js, proto.StreamEvents, 0, func(_ uint64, _ time.Time, data []byte) error {
		var ev proto.TrainStep
		if err := msgpack.Unmarshal(data, &ev); err != nil {
			return err
		}
		l.steps = append(l.steps, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readStream(ctx, js, proto.StreamDeadLetter, 0, func(uint64, time.Time, []byte) error {
		l.deadLetters++
		return nil
	})
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, proto.StreamEpisodes, proto.ConsumerReplayBuffer)
	if err != nil {
		return nil, err
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	if ci.NumPending != 0 {
		return nil, fmt.Errorf("the replay-buffer has %d episodes not delivered yet: the mesh is not drained", ci.NumPending)
	}
	l.ackFloor, l.numAckPending = ci.AckFloor.Stream, ci.NumAckPending
	l.settle()
	return l, nil
}

// settle gives every episode its fate and records every problem found.
func (l *ledger) settle() {
	// The step events: versions 1, 2, 3, ... once each, each batch applied at most once.
	sort.SliceStable(l.steps, func(i, j int) bool { return l.steps[i].Version < l.steps[j].Version })
	appliedAt := map[string]int64{}
	trainedGroups := map[string]bool{}
	for i, st := range l.steps {
		if st.Version != int64(i+1) {
			l.problem("step events: position %d has version %d (versions must run 1, 2, 3, ... once each)", i, st.Version)
			break
		}
		if v, dup := appliedAt[st.BatchID]; dup {
			l.problem("train batch %s applied twice (versions %d and %d)", st.BatchID, v, st.Version)
			continue
		}
		appliedAt[st.BatchID] = st.Version
		tb := l.train[st.BatchID]
		if tb == nil {
			l.problem("version %d applied batch %s, which the train stream does not hold", st.Version, st.BatchID)
			continue
		}
		// The trainer's rule (services/trainer admit): the batch that makes version V is trained at V-1;
		// an episode of a group already trained, or admitted more than eta versions before V-1, is not.
		n := 0
		var admitted []*epRec
		for _, id := range tb.episodes {
			r := l.eps[id]
			if r == nil {
				continue // reported below
			}
			switch {
			case trainedGroups[r.group]:
			case st.Version-1-r.startVersion > eta:
				r.fate, r.staleAt = fateStale, "trainer"
			default:
				r.trained++
				n++
				admitted = append(admitted, r)
			}
		}
		for _, r := range admitted {
			trainedGroups[r.group] = true
		}
		if n != st.Episodes {
			l.problem("version %d: the trainer reports %d episodes trained of batch %s, the ledger %d", st.Version, st.Episodes, st.BatchID, n)
		}
	}
	for _, id := range l.trainOrder {
		if _, ok := appliedAt[id]; !ok {
			l.problem("train batch %s was never applied", id)
		}
		for _, eid := range l.train[id].episodes {
			r := l.eps[eid]
			if r == nil {
				l.problem("train batch %s holds episode %s, which the episodes stream does not hold", id, eid)
				continue
			}
			r.inBatches++
		}
	}
	for _, r := range l.order {
		switch {
		case r.trained == 1:
			r.fate = fateTrained
			if r.infra {
				l.problem("episode %s is an infrastructure failure and was trained", r.id)
			}
		case r.inBatches > 0:
			if r.fate == "" {
				r.fate = fateLost // in a batch, applied, yet refused by the trainer for no reason the ledger knows
			}
		case r.infra:
			r.fate = fateMasked
		default:
			l.settleUnbatched(r)
		}
	}
	pending := 0
	for _, r := range l.order {
		if r.fate == fatePending {
			pending++
			if r.seq <= l.ackFloor {
				r.fate = fateLost // acked by the replay-buffer, yet not trained nor dropped for a known reason
				l.problem("episode %s (seq %d) was acked by the replay-buffer (ack floor %d) and never trained, masked or dropped", r.id, r.seq, l.ackFloor)
			}
		}
	}
	if pending > l.numAckPending {
		l.problem("%d episodes are neither trained nor dropped for a known reason, but the replay-buffer holds only %d", pending, l.numAckPending)
		for _, r := range l.order {
			if r.fate == fatePending {
				r.fate = fateLost
			}
		}
	}
	for _, r := range l.order {
		if r.fate == fateLost {
			l.problem("episode %s (group %s, rollout %s, seq %d, in %d batches, trained %d times) is lost%s", r.id, r.group, r.rollout, r.seq, r.inBatches, r.trained, r.why)
		}
		if r.inBatches > 1 || r.trained > 1 {
			l.problem("episode %s is in %d train batches and was trained %d times", r.id, r.inBatches, r.trained)
		}
	}
}

// settleUnbatched finds why a usable episode is in no train batch. All members of a group are admitted
// together, so they share a start version: a group is stale or fresh as a whole.
func (l *ledger) settleUnbatched(r *epRec) {
	usable := 0
	for _, o := range l.groups[r.group] {
		if !o.infra {
			usable++
		}
	}
	if batch, released := l.batchOf[r.group]; released {
		// Its group went out in a batch without it: it was stale at release, or it came after its group
		// had been released (a member slower than the group timeout).
		if batch.version-r.startVersion > eta {
			r.fate, r.staleAt = fateStale, "replay-buffer"
		} else {
			r.fate = fateLost
			r.why = fmt.Sprintf(": finished %s, stored %s, its group's batch stored %s (%s after the episode)",
				r.finishedAt.UTC().Format(stamp), r.at.UTC().Format(stamp), batch.at.UTC().Format(stamp), batch.at.Sub(r.at).Round(time.Millisecond))
		}
		return
	}
	last := int64(0)
	if len(l.steps) > 0 {
		last = l.steps[len(l.steps)-1].Version
	}
	switch {
	case usable < minGroup:
		r.fate = fateSmall
	case last-r.startVersion > eta:
		r.fate, r.staleAt = fateStale, "replay-buffer" // settled (or to be settled) as stale: the version only grows
	default:
		r.fate = fatePending
	}
}

// row is one line of the fault table: what happened to the episodes published while one fault's window
// was open (from its injection to the next one's, or to the end).
type row struct {
	Fault      string `json:"fault"`
	Injected   int    `json:"injected"`
	Produced   int    `json:"produced"`
	Trained    int    `json:"trained"`
	Masked     int    `json:"masked"`
	Stale      int    `json:"stale"`
	SmallGroup int    `json:"small_group"`
	Pending    int    `json:"pending"`
	Lost       int    `json:"lost"`
	Duplicated int    `json:"duplicated"`
	// Cut counts the episodes that a killed rollout replica had in flight: never published, never trained.
	Cut int `json:"cut,omitempty"`
	// Notes is what the test observed of the fault (the evidence it checked).
	Notes string `json:"notes,omitempty"`
}

func (rw *row) add(r *epRec) {
	rw.Produced++
	switch r.fate {
	case fateTrained:
		rw.Trained++
	case fateMasked:
		rw.Masked++
	case fateStale:
		rw.Stale++
	case fateSmall:
		rw.SmallGroup++
	case fatePending:
		rw.Pending++
	default:
		rw.Lost++
	}
	if r.inBatches > 1 || r.trained > 1 {
		rw.Duplicated++
	}
}

// window is the time from one fault's injection to the next's.
type window struct {
	fault    string
	injected int
	from     time.Time
	// cut is filled for a killed rollout replica: its episodes that never reached the stream.
	cut   int
	notes string
}

// rows splits the ledger by window (each episode by the time it started; a fault's window opens a little
// before its injection, so that the episodes in flight when it struck count with it) and adds a total.
func (l *ledger) rows(ws []window) []row {
	out := make([]row, len(ws))
	for i, w := range ws {
		out[i] = row{Fault: w.fault, Injected: w.injected, Cut: w.cut, Notes: w.notes}
	}
	total := row{Fault: "all"}
	for _, r := range l.order {
		i := sort.Search(len(ws), func(i int) bool { return ws[i].from.After(r.startedAt) }) - 1
		if i < 0 {
			i = 0
		}
		out[i].add(r)
		total.add(r)
	}
	for _, w := range ws {
		total.Injected += w.injected
		total.Cut += w.cut
	}
	return append(out, total)
}

// cutBy counts, over one rollout replica's groups that published fewer members than their size, the
// members that never reached the stream (episodes cut short by the replica's death), and the replica's
// episodes stored while it was dead (in one of the intervals): a killed process publishes nothing, so
// that must be 0.
func (l *ledger) cutBy(rollout string, dead [][2]time.Time) (cut, whileDead int) {
	for _, members := range l.groups {
		if members[0].rollout != rollout {
			continue
		}
		cut += members[0].groupSize - len(members)
		for _, r := range members {
			for _, d := range dead {
				if r.at.After(d[0]) && r.at.Before(d[1]) {
					whileDead++
				}
			}
		}
	}
	return cut, whileDead
}

// maskedStarted counts the infrastructure failures of episodes on one env host that started after a time.
func (l *ledger) maskedStarted(host string, after time.Time) int {
	n := 0
	for _, r := range l.order {
		if r.host == host && r.infra && r.startedAt.After(after) {
			n++
		}
	}
	return n
}

// maskedOn counts the infrastructure failures of episodes on one env host that were in flight at a time
// (started before, stored after), and how many of them were trained.
func (l *ledger) maskedOn(host string, at time.Time) (masked, trained int) {
	for _, r := range l.order {
		if r.host == host && r.infra && r.startedAt.Before(at) && r.at.After(at) {
			masked++
			if r.trained > 0 {
				trained++
			}
		}
	}
	return masked, trained
}

// shorten keeps the kind of a failure message: its first words, without numbers and ids.
func shorten(s string) string {
	if len(s) > 48 {
		s = s[:48]
	}
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, s)
}

// maskedReasons counts the masked episodes by host and failure.
func (l *ledger) maskedReasons() map[string]int {
	out := map[string]int{}
	for _, r := range l.order {
		if r.fate == fateMasked {
			out[fmt.Sprintf("host %q: %s", r.host, r.failure)]++
		}
	}
	return out
}

func (l *ledger) summary() string {
	counts := map[string]int{}
	staleAt := map[string]int{}
	for _, r := range l.order {
		counts[r.fate]++
		if r.fate == fateStale {
			staleAt[r.staleAt]++
		}
	}
	var parts []string
	for _, f := range []string{fateTrained, fateMasked, fateStale, fateSmall, fatePending, fateLost} {
		parts = append(parts, fmt.Sprintf("%s %d", f, counts[f]))
	}
	return fmt.Sprintf("%d episodes (%s; stale dropped by the replay-buffer %d, by the trainer %d), %d train batches, %d versions, %d republished, %d dead-lettered, replay-buffer holds %d",
		len(l.order), strings.Join(parts, ", "), staleAt["replay-buffer"], staleAt["trainer"], len(l.trainOrder), len(l.steps), l.republished, l.deadLetters, l.numAckPending)
}
