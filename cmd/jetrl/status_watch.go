package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// statusSample is one look at a running mesh: the numeric counters of every replica (env hosts first,
// from their micro stats, then the services in pipeline order) and the backlog of each stage's consumer.
type statusSample struct {
	At       time.Time
	Replicas []replicaValues
	Backlog  []stageBacklog
}

// replicaValues is one replica's numeric counters.
type replicaValues struct {
	service, id string
	values      map[string]float64
}

func (r replicaValues) key() string { return r.service + "/" + r.id }

// stageBacklog is what waits on one stage's durable consumer: messages not yet delivered, and delivered and
// not yet acknowledged (the replay-buffer holds a group's episodes unacked until the group is batched).
type stageBacklog struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Waiting  uint64 `json:"waiting"`
	Unacked  int    `json:"unacked"`
	Error    string `json:"error,omitempty"`
}

// backlogStages are the durable consumers of the data path, in pipeline order.
var backlogStages = []struct{ stream, consumer string }{
	{proto.StreamEpisodes, proto.ConsumerReplayBuffer},
	{proto.StreamBatches, proto.ConsumerNormalizer},
	{proto.StreamTrain, proto.ConsumerTrainer},
}

// sampleStatus gathers one statusSample; replicas that do not answer within wait are left out. Every
// service and the env hosts are asked at once, on one reply inbox, so the counters of all stages are of
// the same moment (within the replicas' answering times).
func sampleStatus(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, wait time.Duration) (*statusSample, error) {
	s := &statusSample{At: time.Now()}
	envSubject, err := micro.ControlSubject(micro.StatsVerb, proto.EnvService, "")
	if err != nil {
		return nil, err
	}
	subjects := []string{envSubject}
	for _, svc := range statusServices {
		subjects = append(subjects, proto.SubjectStatus(svc))
	}
	replies, err := gatherRaw(nc, wait, subjects...)
	if err != nil {
		return nil, err
	}
	var hosts, services []replicaValues
	for _, b := range replies {
		var r struct {
			Type      string                 `json:"type"` // micro.StatsResponseType from an env host
			Name      string                 `json:"name"`
			Metadata  map[string]string      `json:"metadata"`
			Endpoints []*micro.EndpointStats `json:"endpoints"`
			Service   string                 `json:"service"` // a service's status reply
			ID        any                    `json:"id"`
			Status    map[string]any         `json:"status"`
		}
		if json.Unmarshal(b, &r) != nil {
			continue
		}
		v := map[string]float64{}
		switch {
		case r.Type == micro.StatsResponseType && r.Name == proto.EnvService:
			for _, ep := range r.Endpoints {
				v["requests"] += float64(ep.NumRequests)
				v["errors"] += float64(ep.NumErrors)
			}
			id := r.Metadata["host_id"]
			if id == "" {
				id = fmt.Sprint(r.ID) // the micro instance id
			}
			hosts = append(hosts, replicaValues{service: "env", id: id, values: v})
		case slices.Contains(statusServices, r.Service):
			for k, x := range r.Status {
				if f, ok := x.(float64); ok {
					v[k] = f
				}
			}
			services = append(services, replicaValues{service: r.Service, id: fmt.Sprint(r.ID), values: v})
		}
	}
	slices.SortFunc(hosts, func(a, b replicaValues) int { return strings.Compare(a.id, b.id) })
	slices.SortStableFunc(services, func(a, b replicaValues) int {
		return slices.Index(statusServices, a.service) - slices.Index(statusServices, b.service)
	})
	s.Replicas = append(hosts, services...)
	for _, st := range backlogStages {
		b := stageBacklog{Stream: st.stream, Consumer: st.consumer}
		cctx, cancel := context.WithTimeout(ctx, wait+time.Second)
		info, err := js.Consumer(cctx, st.stream, st.consumer)
		if err == nil {
			var ci *jetstream.ConsumerInfo
			if ci, err = info.Info(cctx); err == nil {
				b.Waiting, b.Unacked = ci.NumPending, ci.NumAckPending
			}
		}
		cancel()
		if err != nil {
			b.Error = err.Error()
		}
		s.Backlog = append(s.Backlog, b)
	}
	return s, nil
}

// statusRow is one replica's line in the watch view.
type statusRow struct {
	Service string             `json:"service"`
	ID      string             `json:"id"`
	Rates   map[string]float64 `json:"rates_per_s,omitempty"`
	Detail  map[string]any     `json:"detail"`
}

// watchRates names, per service, the counters whose rate the watch view shows (first one leads the line).
var watchRates = map[string][]string{
	"rollout":              {"episodes_published", "turns"},
	"replay-buffer":        {"episodes_received", "batches_released"},
	"advantage-normalizer": {"batches", "episodes"},
	"trainer":              {"policy_version", "episodes_trained"},
	"env":                  {"requests"},
}

// watchDetail names, per service, the counters shown as they are.
var watchDetail = map[string][]string{
	"rollout":              {"policy_version", "episodes_in_flight", "infra_failures", "breaker_opens", "episodes_stopped_stale"},
	"replay-buffer":        {"pending_groups", "dropped_stale", "cut_playing", "late", "orphaned_groups", "replica_silences", "dead_lettered"},
	"advantage-normalizer": {"dead_lettered"},
	"trainer":              {"policy_version", "busy_fraction", "max_staleness", "stale_dropped", "dead_lettered"},
	"env":                  {"errors"},
}

// rowsOf turns a sample into the view's rows, with rates against prev (none when prev is nil or the
// replica is new since it).
func rowsOf(prev, cur *statusSample) []statusRow {
	before := map[string]map[string]float64{}
	if prev != nil {
		for _, r := range prev.Replicas {
			before[r.key()] = r.values
		}
	}
	var rows []statusRow
	for _, r := range cur.Replicas {
		row := statusRow{Service: r.service, ID: r.id, Detail: map[string]any{}}
		if old, ok := before[r.key()]; ok {
			secs := cur.At.Sub(prev.At).Seconds()
			row.Rates = map[string]float64{}
			for _, k := range watchRates[r.service] {
				if v, ok := r.values[k]; ok && secs > 0 {
					row.Rates[k] = max(0, v-old[k]) / secs
				}
			}
		}
		for _, k := range watchDetail[r.service] {
			if v, ok := r.values[k]; ok {
				row.Detail[k] = v
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// rateUnits names the rates in the table.
var rateUnits = map[string]string{
	"episodes_published": "episodes/s", "turns": "turns/s", "episodes_received": "episodes/s in",
	"batches_released": "batches/s out", "batches": "batches/s", "episodes": "episodes/s",
	"policy_version": "versions/s", "episodes_trained": "episodes/s trained", "requests": "requests/s",
}

// renderWatch writes one sample of the watch view: a line per replica (rates since the previous sample,
// "-" on the first) and the backlog of each stage.
func renderWatch(w io.Writer, prev, cur *statusSample) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tREPLICA\tRATE\tSTATE\n", cur.At.Format("15:04:05"))
	rows := rowsOf(prev, cur)
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no replica answered)\t\t\t")
	}
	for _, r := range rows {
		var rates []string
		for _, k := range watchRates[r.Service] {
			if v, ok := r.Rates[k]; ok {
				rates = append(rates, fmt.Sprintf("%.1f %s", v, rateUnits[k]))
			}
		}
		rate := strings.Join(rates, ", ")
		if rate == "" {
			rate = "-"
		}
		var detail []string
		for _, k := range watchDetail[r.Service] {
			if v, ok := r.Detail[k].(float64); ok {
				if k == "busy_fraction" {
					detail = append(detail, fmt.Sprintf("busy %.0f%%", 100*v))
					continue
				}
				detail = append(detail, fmt.Sprintf("%s %g", strings.ReplaceAll(k, "_", " "), v))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Service, r.ID, rate, strings.Join(detail, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var backlog []string
	for _, b := range cur.Backlog {
		if b.Error != "" {
			backlog = append(backlog, fmt.Sprintf("%s (%s): %s", b.Stream, b.Consumer, b.Error))
			continue
		}
		backlog = append(backlog, fmt.Sprintf("%s %d waiting, %d unacked (%s)", b.Stream, b.Waiting, b.Unacked, b.Consumer))
	}
	_, err := fmt.Fprintf(w, "backlog: %s\n", strings.Join(backlog, "; "))
	return err
}

// watchJSON is one sample of the watch view as --json prints it.
type watchJSON struct {
	At      time.Time      `json:"at"`
	Rows    []statusRow    `json:"replicas"`
	Backlog []stageBacklog `json:"backlog"`
}

// watch samples the mesh every c.Watch until ctx ends (or c.Count samples), printing each.
func (c *statusCmd) watch(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, out io.Writer) error {
	var prev *statusSample
	tick := time.NewTicker(c.Watch)
	defer tick.Stop()
	for n := 1; ; n++ {
		cur, err := sampleStatus(ctx, nc, js, c.Wait)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if c.JSON {
			b, err := json.Marshal(watchJSON{At: cur.At, Rows: rowsOf(prev, cur), Backlog: cur.Backlog})
			if err != nil {
				return err
			}
			fmt.Fprintln(out, string(b))
		} else {
			if prev != nil {
				fmt.Fprintln(out)
			}
			if err := renderWatch(out, prev, cur); err != nil {
				return err
			}
		}
		prev = cur
		if c.Count > 0 && n >= c.Count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// gatherRaw sends one request to each subject, all answered on one inbox, and collects the raw replies
// that arrive within wait.
func gatherRaw(nc *nats.Conn, wait time.Duration, subjects ...string) ([][]byte, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	for _, subject := range subjects {
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			return nil, err
		}
	}
	var out [][]byte
	deadline := time.Now().Add(wait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if errors.Is(err, nats.ErrTimeout) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, msg.Data)
	}
}
