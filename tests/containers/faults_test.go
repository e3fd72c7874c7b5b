//go:build containers

package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/vmihailenco/msgpack/v5"
)

// Held-out evaluation: the same instances (seed) for the initial and the trained policy.
const (
	evalEpisodes = 100
	evalSeed     = 5
	// minRise is the least rise of held-out success (in points) the trained policy must show.
	minRise = 0.20
	// After the faults the mesh trains on until held-out success reaches learnTarget (evaluated every
	// evalEvery) or for learnFor at most.
	learnTarget = 0.5
	learnFor    = 10 * time.Minute
	evalEvery   = 45 * time.Second
	// inFlight is longer than an episode takes (with the env hosts' step latency).
	inFlight = 5 * time.Second
)

// TestMeshInContainers runs the mesh from the images (3-node NATS cluster, 2 env hosts, 2 rollout
// replicas, replay-buffer, advantage-normalizer, trainer), lets it train, injects one fault after another
// into the same running mesh, and then checks by ids, from the streams alone, that every episode
// published was trained exactly once or masked or dropped for a recorded reason (none lost, none trained
// twice), and that held-out success of the trained policy rose over the initial one's. With
// JETRL_FAULT_TABLE set to a folder, it writes the fault table there (faults.md, faults.json).
func TestMeshInContainers(t *testing.T) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") != "true" {
		t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 24*time.Minute)
	defer cancel()
	// The final checks' failures are said again after the containers' logs, which a failed test prints
	// (cleanups run last registered first), so that the end of the output names what failed.
	var failures []string
	t.Cleanup(func() {
		if len(failures) > 0 {
			t.Logf("the final checks failed:\n%s", strings.Join(failures, "\n"))
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		failures = append(failures, fmt.Sprintf(format, args...))
		t.Errorf(format, args...)
	}
	fatal := func(format string, args ...any) {
		t.Helper()
		fail(format, args...)
		t.FailNow()
	}
	m := startMesh(t, ctx, 2, 2)

	// The initial policy (version 0), evaluated on held-out instances while the mesh trains.
	var rec0Weights []byte
	eventually(t, 4*time.Minute, "the trainer to publish version 0", func() bool {
		rec := m.current(ctx)
		if rec == nil {
			return false
		}
		if rec.Version != 0 {
			t.Fatalf("first version seen is %d: version 0's weights may be gone", rec.Version)
		}
		w, err := m.weights(ctx, rec)
		if err != nil {
			t.Logf("version 0 weights: %v", err)
			return false
		}
		rec0Weights = w
		return true
	})
	t.Logf("mesh up, version 0 published after %v", time.Since(began).Round(time.Second))
	type evalResult struct {
		success float64
		err     error
	}
	initial := make(chan evalResult, 1)
	go func() {
		s, err := m.heldout(ctx, rec0Weights, "initial")
		initial <- evalResult{s, err}
	}()

	windows := []window{{fault: "none (training, no fault)", from: began}}
	// inject opens the window of a fault, inFlight before its injection so that the episodes in flight
	// when it strikes count with it; note records what the test saw of it.
	inject := func(fault string, n int) (note func(string)) {
		windows = append(windows, window{fault: fault, injected: n, from: time.Now().Add(-inFlight)})
		i := len(windows) - 1
		return func(s string) { windows[i].notes = s; t.Logf("%s: %s", fault, s) }
	}
	m.waitVersion(ctx, 10, 4*time.Minute, "training from the start")

	// (a) kill -9 the trainer mid-run, twice; it resumes from its checkpoint.
	step(t, "trainer SIGKILL", func(t *testing.T) {
		note := inject("kill -9 trainer, restart", 2)
		var notes []string
		for i := 0; i < 2; i++ {
			before := m.version(ctx)
			m.kill(ctx, "trainer")
			time.Sleep(3 * time.Second) // train batches pile up meanwhile
			m.restart(ctx, "trainer")
			var st map[string]any
			eventually(t, 90*time.Second, "the restarted trainer to answer", func() bool {
				st = m.status("trainer")
				return st != nil
			})
			if st["resumed_from_checkpoint"] != true {
				t.Fatalf("the restarted trainer did not resume from its checkpoint: %v", st)
			}
			if v := int64(number(st, "policy_version")); v < before {
				t.Fatalf("the restarted trainer is at version %d, before the kill %d was published", v, before)
			}
			after := m.waitVersion(ctx, before+5, 2*time.Minute, "training after the trainer's restart")
			notes = append(notes, fmt.Sprintf("killed at v%d, resumed from checkpoint at v%d", before, int64(number(st, "policy_version"))))
			t.Logf("trainer killed at version %d, resumed from its checkpoint at %v, now %d", before, st["policy_version"], after)
		}
		note(strings.Join(notes, "; "))
	})

	// (b) kill one env host: the rollouts' breakers open, its episodes in flight are masked, training goes on.
	var envKilled, envBack time.Time
	step(t, "env host SIGKILL", func(t *testing.T) {
		opens := sum(m.statuses("rollout", 2), "breaker_opens")
		before := m.version(ctx)
		poll(t, time.Minute, "episodes in flight", func() bool { return sum(m.statuses("rollout", 2), "episodes_in_flight") >= 16 })
		note := inject("kill -9 env host env-2", 1)
		envKilled = time.Now() // episodes in flight now fail as soon as the process is gone
		m.kill(ctx, "env-2")
		eventually(t, 30*time.Second, "a rollout's breaker on env-2 to open", func() bool { return sum(m.statuses("rollout", 2), "breaker_opens") > opens })
		after := m.waitVersion(ctx, before+5, 2*time.Minute, "training with one env host")
		m.restart(ctx, "env-2")
		envBack = time.Now()
		if err := m.waitHealthy(ctx, "env-2", time.Minute); err != nil {
			t.Fatal(err)
		}
		note(fmt.Sprintf("%v rollout breaker(s) on env-2 opened; v%d to v%d on env-1 alone", sum(m.statuses("rollout", 2), "breaker_opens")-opens, before, after))
	})

	// (c) kill one rollout replica while it has episodes in flight, rolloutKills times (restarted in
	// between): the other goes on each time; the episodes it had in flight are never published, so they
	// never reach the trainer (counted at the end from the gate's admissions).
	var rollDead [][2]time.Time
	step(t, "rollout SIGKILL", func(t *testing.T) {
		note := inject(fmt.Sprintf("kill -9 rollout replica rollout-2, %d times", rolloutKills), rolloutKills)
		var notes []string
		for i := 0; i < rolloutKills; i++ {
			inFlight := 0.0
			poll(t, 2*time.Minute, "rollout-2 to have episodes in flight", func() bool {
				for _, st := range m.statuses("rollout", 2) {
					if st["id"] == "rollout-2" && number(st, "episodes_in_flight") >= 16 {
						inFlight = number(st, "episodes_in_flight")
						return true
					}
				}
				return false
			})
			before := m.version(ctx)
			m.kill(ctx, "rollout-2")
			dead := time.Now()
			after := m.waitVersion(ctx, before+5, 2*time.Minute, "training with one rollout replica")
			m.restart(ctx, "rollout-2")
			rollDead = append(rollDead, [2]time.Time{dead, time.Now()})
			notes = append(notes, fmt.Sprintf("killed with %v episodes in flight, v%d to v%d with rollout-1 alone", inFlight, before, after))
		}
		// Each kill left groups open at the replay-buffer; their replica stopped listing them in its
		// heartbeat (dead, then restarted without them), so they are released after the replica timeout
		// (10 s), well before the group timeout.
		orphaned := 0.0
		eventually(t, groupTimeout, "the killed replica's open groups released on its heartbeat", func() bool {
			orphaned = sum(m.statuses("replay-buffer", 1), "orphaned_groups")
			return orphaned >= rolloutKills
		})
		notes = append(notes, fmt.Sprintf("%v of its open groups released on its heartbeat before the group timeout", orphaned))
		note(strings.Join(notes, "; "))
	})

	// (d) stop one NATS node of three (the meta leader, unless that is nats-1): the mesh goes on, the
	// node comes back and catches up.
	step(t, "NATS node stop", func(t *testing.T) {
		leader, err := m.metaLeader(ctx, "nats-1")
		if err != nil {
			t.Fatal(err)
		}
		node := leader
		if node == "nats-1" {
			node = "nats-2"
		}
		note := inject("stop NATS node "+node, 1)
		before := m.version(ctx)
		buf := m.statuses("replay-buffer", 1)
		orphaned, late, silences := sum(buf, "orphaned_groups"), sum(buf, "late"), sum(buf, "replica_silences")
		m.stop(ctx, node, 10*time.Second)
		down := time.Now()
		after := m.waitVersion(ctx, before+5, 2*time.Minute, "training on two NATS nodes")
		if d := time.Since(down); d < 20*time.Second {
			time.Sleep(20*time.Second - d) // down for a while, so that it has something to catch up on
		}
		after = max(after, m.version(ctx))
		m.restart(ctx, node)
		if err := m.waitHealthy(ctx, node, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		downFor := time.Since(down).Round(time.Second)
		var why string
		eventually(t, 2*time.Minute, node+" to rejoin every stream as a current replica", func() bool {
			ok, w := m.replicasCurrent(ctx)
			if w != why && w != "" {
				t.Logf("not yet: %s", w)
			}
			why = w
			return ok
		})
		later := m.waitVersion(ctx, after+3, 2*time.Minute, "training after "+node+" rejoined")
		buf = m.statuses("replay-buffer", 1)
		note(fmt.Sprintf("%s down %v (meta leader was %s), v%d to v%d meanwhile; rejoined, every stream's replicas current; "+
			"by v%d the replay-buffer released %v groups on a heartbeat, counted %v members late and heard no heartbeat from a rollout replica for over 10 s %v times",
			node, downFor, leader, before, after, later, sum(buf, "orphaned_groups")-orphaned, sum(buf, "late")-late, sum(buf, "replica_silences")-silences))
	})

	// (e) cut the trainer off the network for 20 s, then reconnect it.
	step(t, "trainer network partition", func(t *testing.T) {
		note := inject("trainer off the network 20 s", 1)
		before := m.version(ctx)
		m.disconnect(ctx, "trainer")
		time.Sleep(20 * time.Second)
		during := m.version(ctx)
		m.connect(ctx, "trainer")
		if during > before+1 {
			t.Fatalf("version went from %d to %d while the trainer was off the network", before, during)
		}
		after := m.waitVersion(ctx, during+5, 3*time.Minute, "training after the trainer reconnected")
		note(fmt.Sprintf("v%d when cut off, v%d after 20 s, v%d after reconnecting", before, during, after))
	})

	// Train on after the faults until held-out success reaches learnTarget or learnFor has passed.
	step(t, "train on", func(t *testing.T) {
		inject("none (training on after the faults)", 0)
		deadline := time.Now().Add(learnFor)
		for time.Now().Before(deadline) {
			time.Sleep(min(evalEvery, time.Until(deadline)))
			rec := m.current(ctx)
			if rec == nil {
				continue
			}
			w, err := m.weights(ctx, rec)
			if err != nil {
				t.Logf("weights of version %d: %v", rec.Version, err)
				continue
			}
			s, err := m.heldout(ctx, w, fmt.Sprintf("v%d", rec.Version))
			if err != nil {
				t.Fatal(err)
			}
			if s >= learnTarget {
				break
			}
		}
	})

	// Stop producing and let everything released reach the trainer.
	ended := time.Now()
	for _, r := range []string{"rollout-1", "rollout-2"} {
		m.stop(ctx, r, 30*time.Second)
	}
	m.drain(ctx)
	t.Logf("faults done and drained at %v", time.Since(began).Round(time.Second))

	l, err := readLedger(ctx, m.js)
	if err != nil {
		fatal("%v", err)
	}
	t.Logf("ledger: %s", l.summary())
	for reason, n := range l.maskedReasons() {
		t.Logf("masked: %d × %s", n, reason)
	}
	slack := m.gateSlack(ctx)
	t.Logf("staleness gate: %s", slack)
	for _, p := range l.problems {
		fail("ledger: %s", p)
	}
	// Fault-specific evidence from the ledger.
	masked, maskedTrained := l.maskedOn("env-2", envKilled)
	// Sessions that start on the restarted host while a rollout's breaker on it is still open are cut short.
	maskedBack := l.maskedStarted("env-2", envBack)
	if masked == 0 {
		fail("no episode in flight on env-2 was masked when it was killed")
	}
	if maskedTrained != 0 {
		fail("%d masked episodes of env-2 were trained", maskedTrained)
	}
	_, whileDead := l.cutBy("rollout-2", rollDead)
	if whileDead != 0 {
		fail("%d episodes of rollout-2 were stored while it was dead", whileDead)
	}
	// Every admission is an episode published, or one cut short unpublished: the rollouts were stopped with
	// SIGTERM, which publishes what is in flight, so only the killed replica's episodes in flight are missing.
	adm, err := m.admission(ctx)
	if err != nil {
		fatal("%v", err)
	}
	cut := int(adm.Started) - len(l.order)
	if cut <= 0 || cut > rolloutKills*rolloutConcurrency {
		fail("%d episodes admitted and never published (admissions %d, episodes published %d), want between 1 and %d, what the killed replica could have in flight",
			cut, adm.Started, len(l.order), rolloutKills*rolloutConcurrency)
	}
	// The staleness gate got back every admission that will not reach the trainer: what is outstanding is
	// what the trainer consumed (trained or dropped stale) plus what the replay-buffer still holds. The
	// killed replica's cut episodes were refunded when their groups timed out, known from their start
	// markers; only a replica killed between claiming a group and announcing it could leak that one group
	// (per kill).
	if rec := m.current(ctx); rec == nil {
		fail("no version record at the end")
	} else {
		held := int64(0)
		for _, r := range l.order {
			if r.fate == fatePending {
				held++
			}
		}
		unaccounted := adm.Started - adm.Refunded - rec.EpisodesConsumed - held
		t.Logf("staleness gate accounting: %d admitted, %d refunded, %d consumed by the trainer, %d held by the replay-buffer: %d unaccounted",
			adm.Started, adm.Refunded, rec.EpisodesConsumed, held, unaccounted)
		if unaccounted < 0 || unaccounted > rolloutKills*groupSize {
			fail("staleness gate: %d admissions unaccounted for (admitted %d, refunded %d, consumed %d, held %d), want 0 (at most one group per kill of a rollout, %d)",
				unaccounted, adm.Started, adm.Refunded, rec.EpisodesConsumed, held, rolloutKills*groupSize)
		}
	}
	for i := range windows {
		switch {
		case strings.HasPrefix(windows[i].fault, "kill -9 env"):
			windows[i].notes += fmt.Sprintf("; %d of its episodes in flight masked, none trained; after its restart, %d episodes masked on it while the breakers were still open", masked, maskedBack)
		case strings.HasPrefix(windows[i].fault, "kill -9 rollout"):
			windows[i].cut = cut
			windows[i].notes += fmt.Sprintf("; %d episodes in flight cut (admitted, never published), so never trained", cut)
		}
	}
	rows := l.rows(windows)
	table := faultTable(rows)
	t.Logf("fault table:\n%s", table)
	for _, r := range rows {
		if r.Lost != 0 || r.Duplicated != 0 {
			fail("%s: %d lost, %d duplicated, want 0 and 0", r.Fault, r.Lost, r.Duplicated)
		}
	}

	// Held-out success rises from the initial policy to the trained one.
	ini := <-initial
	if ini.err != nil {
		fatal("initial evaluation: %v", ini.err)
	}
	rec := m.current(ctx)
	if rec == nil {
		fatal("no policy version at the end")
	}
	w, err := m.weights(ctx, rec)
	if err != nil {
		fatal("%v", err)
	}
	final, err := m.heldout(ctx, w, fmt.Sprintf("v%d", rec.Version))
	if err != nil {
		fatal("final evaluation: %v", err)
	}
	wall := time.Since(began).Round(time.Second)
	learn := fmt.Sprintf("held-out success on %d alfworld instances: %.1f%% at version 0, %.1f%% at version %d (%d episodes trained)",
		evalEpisodes, 100*ini.success, 100*final, rec.Version, rec.EpisodesTrained)
	t.Logf("%s; wall time %v (training until %v)", learn, wall, ended.Sub(began).Round(time.Second))
	if final-ini.success < minRise {
		fail("held-out success rose by %.1f points, want at least %.0f", 100*(final-ini.success), 100*minRise)
	}
	writeTable(t, rows, table, learn+"; staleness gate: "+slack, wall)
}

// admission reads the staleness gate's counter.
func (m *mesh) admission(ctx context.Context) (proto.Admission, error) {
	var a proto.Admission
	kv, err := m.js.KeyValue(ctx, proto.BucketAdmission)
	if err != nil {
		return a, err
	}
	e, err := kv.Get(ctx, proto.KeyAdmission)
	if err != nil {
		return a, err
	}
	err = msgpack.Unmarshal(e.Value(), &a)
	return a, err
}

// gateSlack is what rollout may still start at the final version under the staleness gate: its limit
// less the admissions outstanding (started, not refunded). Admissions never refunded (a killed replica's
// groups that published no member, episodes the trainer drops as stale, batches over B) shrink it for good.
func (m *mesh) gateSlack(ctx context.Context) string {
	a, err := m.admission(ctx)
	if err != nil {
		return err.Error()
	}
	rec := m.current(ctx)
	if rec == nil {
		return "no version record"
	}
	// The rollouts' bound (rollout.StalenessGate.Limit).
	limit := max((eta+rec.Version+1)*batchSize, rec.EpisodesConsumed+(eta+1)*batchSize)
	return fmt.Sprintf("admissions started %d, refunded %d, outstanding %d; gate limit at version %d (%d consumed): %d; slack %d (%d at the start)",
		a.Started, a.Refunded, a.Started-a.Refunded, rec.Version, rec.EpisodesConsumed, limit, limit-(a.Started-a.Refunded), (eta+1)*batchSize)
}

// step runs one phase of the test as a subtest, and stops the test when it fails (the mesh is shared).
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, fn) {
		t.FailNow()
	}
}

// drain waits until every episode published was delivered to the replay-buffer, every batch released
// reached the trainer, and the trainer's version stopped moving.
func (m *mesh) drain(ctx context.Context) {
	m.t.Helper()
	last, since := int64(-1), time.Now()
	eventually(m.t, 3*time.Minute, "the pipeline to drain", func() bool {
		for _, c := range []struct{ stream, name string }{
			{"JETRL_EPISODES", "replay-buffer"}, {"JETRL_BATCHES", "advantage-normalizer"}, {"JETRL_TRAIN", "trainer"},
		} {
			cons, err := m.js.Consumer(ctx, c.stream, c.name)
			if err != nil {
				return false
			}
			info, err := cons.Info(ctx)
			if err != nil || info.NumPending > 0 || (c.stream != "JETRL_EPISODES" && info.NumAckPending > 0) {
				return false
			}
		}
		if v := m.version(ctx); v != last {
			last, since = v, time.Now()
			return false
		}
		return time.Since(since) >= 5*time.Second
	})
}

// heldout evaluates weights on held-out instances through the mesh's env hosts with the operator CLI
// (`jetrl eval --nats ... --json`), and returns the success rate.
func (m *mesh) heldout(ctx context.Context, weights []byte, name string) (float64, error) {
	bin := filepath.Join("..", "..", "bin", "jetrl")
	if d := os.Getenv("JETRL_BIN"); d != "" {
		bin = filepath.Join(d, "jetrl")
	}
	f := filepath.Join(m.t.TempDir(), "weights-"+name+".bin")
	if err := os.WriteFile(f, weights, 0o644); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, "eval", "--nats", m.url, "--weights", f, "--tasks", "alfworld",
		"--episodes", fmt.Sprint(evalEpisodes), "--seed", fmt.Sprint(evalSeed), "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, stdout.String(), stderr.String())
	}
	var out struct {
		Tasks map[string]struct {
			Success       float64 `json:"success"`
			Episodes      int     `json:"episodes"`
			InfraFailures int     `json:"infra_failures"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return 0, fmt.Errorf("jetrl eval --json printed %q: %v", stdout.String(), err)
	}
	r, ok := out.Tasks["alfworld"]
	if !ok || r.Episodes < evalEpisodes*9/10 {
		return 0, fmt.Errorf("jetrl eval --json: %s (want %d alfworld episodes scored)", stdout.String(), evalEpisodes)
	}
	m.t.Logf("held-out eval of %s: success %.1f%% over %d episodes (%d infrastructure failures)", name, 100*r.Success, r.Episodes, r.InfraFailures)
	return r.Success, nil
}

// faultTable renders the rows as a markdown table.
func faultTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| fault | injected | episodes produced | trained | masked | dropped stale | dropped small group | pending at end | lost | duplicated |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		name := r.Fault
		if r.Fault == "all" {
			name = "**all**"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n",
			name, r.Injected, r.Produced, r.Trained, r.Masked, r.Stale, r.SmallGroup, r.Pending, r.Lost, r.Duplicated)
	}
	return b.String()
}

// writeTable writes the fault table to $JETRL_FAULT_TABLE/faults.{md,json} when that is set.
func writeTable(t *testing.T, rows []row, table, learn string, wall time.Duration) {
	dir := os.Getenv("JETRL_FAULT_TABLE")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Measured %s by `make test-containers` (`TestMeshInContainers`), wall time %v.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), wall)
	md.WriteString(table)
	md.WriteString("\nWhat the test saw of each fault:\n\n")
	for _, r := range rows {
		if r.Notes != "" {
			fmt.Fprintf(&md, "- %s: %s\n", r.Fault, r.Notes)
		}
	}
	fmt.Fprintf(&md, "\n%s.\n", strings.ToUpper(learn[:1])+learn[1:])
	js, err := json.MarshalIndent(map[string]any{"rows": rows, "learning": learn, "wall_seconds": wall.Seconds()}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"faults.md": []byte(md.String()), "faults.json": append(js, '\n')} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("fault table written to %s", filepath.Join(dir, "faults.md"))
}

// eventually checks cond every second until it holds or within has passed.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	every(t, time.Second, within, what, cond)
}

// poll checks cond without pause (to inject a fault at a moment cond describes).
func poll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	every(t, 0, within, what, cond)
}

func every(t *testing.T, pause, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pause)
	}
}
