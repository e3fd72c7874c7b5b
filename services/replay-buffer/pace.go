package replaybuffer

import (
	"slices"
	"sync"
	"time"

	"github.com/jetrl/jetrl/proto"
)

// paceSamples is how many of the trainer's last steps the expected time per turn is the median of, and
// paceMinSamples how many it needs before it expects anything.
const (
	paceSamples    = 9
	paceMinSamples = 3
)

// pace follows the trainer's steps as this buffer sees them: the batches it released and the policy
// versions (each names the batch it applied). From them it knows which released batches are not applied
// yet, so the version the next batch will train at, and when the step the trainer is on should end.
// Versions arrive on the watcher's goroutine and releases on the run loop's, hence the lock.
type pace struct {
	mu        sync.Mutex
	version   int64
	versionAt time.Time
	// open are the batches released and not seen applied, oldest first.
	open []released
	// perTurn are the last steps' durations over the turns of the batch each applied. A step lasts from
	// the later of the previous version and the release of the batch applied, to the version that applied
	// it; the trainer's work grows with the turns it trains on, which vary from batch to batch.
	perTurn []float64
	// whole is set once a version named a batch this buffer released: the trainer applies batches in
	// the order they were queued, so from then on open holds every batch it has not applied. Until then
	// batches a previous buffer released may be queued ahead of this buffer's, and open misses them.
	whole bool
}

type released struct {
	id    string
	at    time.Time
	turns int
}

func newPace() *pace { return &pace{version: -1} }

// released records a batch of turns turns this buffer published.
func (p *pace) released(id string, at time.Time, turns int) {
	p.mu.Lock()
	p.open = append(p.open, released{id, at, max(turns, 1)})
	p.mu.Unlock()
}

// applied takes a policy version seen at at. The batch it names, and every batch released before it
// (applied, or refused by the trainer: batches reach it in release order), are no longer open.
func (p *pace) applied(rec proto.PolicyVersion, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec.Version <= p.version {
		return // the watch repeating the current record
	}
	if i := slices.IndexFunc(p.open, func(r released) bool { return r.id == rec.BatchID }); i >= 0 {
		if rec.Version == p.version+1 && !p.versionAt.IsZero() {
			start := p.open[i].at
			if p.versionAt.After(start) {
				start = p.versionAt
			}
			if d := at.Sub(start); d > 0 {
				p.perTurn = append(p.perTurn, float64(d)/float64(p.open[i].turns))
				if len(p.perTurn) > paceSamples {
					p.perTurn = p.perTurn[1:]
				}
			}
		}
		p.open = slices.Delete(p.open, 0, i+1)
		p.whole = true
	}
	p.version, p.versionAt = rec.Version, at
}

// ahead is how many released batches the trainer has not applied: the next batch trains at the current
// version plus this many.
func (p *pace) ahead() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open)
}

// complete reports whether ahead counts every batch the trainer has not applied (see whole).
func (p *pace) complete() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.whole
}

// stepEnd is when the trainer's current step should end: its start (the later of the last version and
// the release of the oldest open batch, the one it trains) plus that batch's turns times the median time
// per turn of the last steps. ok is false while no batch is open or too few steps were seen.
func (p *pace) stepEnd() (end time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.open) == 0 || len(p.perTurn) < paceMinSamples {
		return time.Time{}, false
	}
	start := p.open[0].at
	if p.versionAt.After(start) {
		start = p.versionAt
	}
	r := slices.Clone(p.perTurn)
	slices.Sort(r)
	return start.Add(time.Duration(r[len(r)/2] * float64(p.open[0].turns))), true
}
