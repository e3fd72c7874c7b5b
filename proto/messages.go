package proto

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Splits of every task family; instances of one split never occur in the other.
const (
	SplitTrain   = "train"
	SplitHeldout = "heldout"
)

// Episode and step statuses.
const (
	StatusRunning       = "running"
	StatusCompleted     = "completed"      // the agent ended the episode (reward says how well)
	StatusTurnLimit     = "turn-limit"     // the agent ran out of turns
	StatusInvalidAction = "invalid-action" // the agent's output could not be acted on and ended the episode
	StatusError         = "error"          // the environment failed; an infrastructure failure, not the agent's
	// StatusStale: the rollout stopped playing the episode because no batch could take it any more (the
	// replay-buffer had composed the last batch that could, AdmissionClosed, or the trainer had passed the
	// version it was admitted under by more than the staleness bound); its turns are those played until
	// then, and the replay-buffer counts it stale.
	StatusStale = "stale"
)

// Policy pool members that can produce a turn.
const (
	PolicyCurrent    = "current"
	PolicyStale      = "stale"
	PolicyCheckpoint = "checkpoint" // a fixed saved policy, for instance from another run
)

// Message is one chat message of an environment's opening (OpenAI roles).
type Message struct {
	Role    string `msgpack:"role" json:"role"`
	Content string `msgpack:"content" json:"content"`
}

// Tool describes one tool in the OpenAI tool format; Parameters is a JSON schema as JSON text.
type Tool struct {
	Name        string `msgpack:"name" json:"name"`
	Description string `msgpack:"description" json:"description"`
	Parameters  string `msgpack:"parameters" json:"parameters"`
}

// OpenAI renders the tool as {"type":"function","function":{...}}.
func (t Tool) OpenAI() map[string]any {
	var params any = map[string]any{"type": "object"}
	if t.Parameters != "" {
		_ = json.Unmarshal([]byte(t.Parameters), &params)
	}
	return map[string]any{"type": "function", "function": map[string]any{
		"name": t.Name, "description": t.Description, "parameters": params,
	}}
}

// ToolCall is one call of a tool: its name and its arguments as a JSON object.
type ToolCall struct {
	Name      string `msgpack:"name" json:"name"`
	Arguments string `msgpack:"arguments" json:"arguments"`
}

// Text renders a call for a text policy: the tool name followed by the argument values, in key order.
func (c ToolCall) Text() string {
	if s, ok := c.flatText(); ok {
		return s
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil || len(args) == 0 {
		return c.Name
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(c.Name)
	for _, k := range keys {
		b.WriteByte(' ')
		fmt.Fprint(&b, args[k])
	}
	return b.String()
}

// flatText is Text for the common case, arguments that are a flat JSON object of at most 8 plain string
// values (no escapes, valid UTF-8, distinct keys), without decoding JSON into a map: rollout renders every
// admissible call of every turn. ok is false for anything else, which Text then decodes in full.
func (c ToolCall) flatText() (string, bool) {
	type pair struct{ k, v string }
	var pairs [8]pair
	n, a := 0, c.Arguments
	i := skipSpace(a, 0)
	if i >= len(a) || a[i] != '{' {
		return "", false
	}
	i = skipSpace(a, i+1)
	if i < len(a) && a[i] == '}' {
		return c.Name, skipSpace(a, i+1) == len(a)
	}
	size := len(c.Name)
	for {
		if n == len(pairs) {
			return "", false
		}
		k, j, ok := plainString(a, i)
		if !ok {
			return "", false
		}
		if j = skipSpace(a, j); j >= len(a) || a[j] != ':' {
			return "", false
		}
		v, j, ok := plainString(a, skipSpace(a, j+1))
		if !ok {
			return "", false
		}
		for _, p := range pairs[:n] {
			if p.k == k {
				return "", false // a repeated key: the last one wins, as in the full decode
			}
		}
		pairs[n], size = pair{k, v}, size+1+len(v)
		n++
		if j = skipSpace(a, j); j < len(a) && a[j] == ',' {
			i = skipSpace(a, j+1)
			continue
		}
		if j >= len(a) || a[j] != '}' || skipSpace(a, j+1) != len(a) {
			return "", false
		}
		break
	}
	for x := 1; x < n; x++ { // insertion sort by key
		for y := x; y > 0 && pairs[y].k < pairs[y-1].k; y-- {
			pairs[y], pairs[y-1] = pairs[y-1], pairs[y]
		}
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(c.Name)
	for _, p := range pairs[:n] {
		b.WriteByte(' ')
		b.WriteString(p.v)
	}
	return b.String(), true
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the JSON string at s[i:] if it needs no unescaping: no backslash, no control
// character, valid UTF-8. It returns the contents and the index after the closing quote.
func plainString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	ascii := true
	for j := i + 1; j < len(s); j++ {
		switch ch := s[j]; {
		case ch == '"':
			if v := s[i+1 : j]; ascii || utf8.ValidString(v) {
				return v, j + 1, true
			}
			return "", 0, false
		case ch == '\\' || ch < 0x20:
			return "", 0, false
		case ch >= 0x80:
			ascii = false
		}
	}
	return "", 0, false
}

// EnvStartRequest asks an env host for a new session of one task instance.
type EnvStartRequest struct {
	Schema    int    `msgpack:"schema"`
	Task      string `msgpack:"task"`
	Split     string `msgpack:"split"`
	Seed      uint64 `msgpack:"seed"`
	EpisodeID string `msgpack:"episode_id"`
}

// EnvStartReply opens a session: the session id (which names the host), messages, tools and admissible calls.
type EnvStartReply struct {
	Schema     int        `msgpack:"schema"`
	SessionID  string     `msgpack:"session_id"`
	HostID     string     `msgpack:"host_id"`
	Messages   []Message  `msgpack:"messages"`
	Tools      []Tool     `msgpack:"tools"`
	Admissible []ToolCall `msgpack:"admissible"`
	MaxTurns   int        `msgpack:"max_turns"`
	// Instruction and Observation repeat the goal and the first observation of Messages, for text policies.
	Instruction string `msgpack:"instruction"`
	Observation string `msgpack:"observation"`
}

// EnvStepRequest sends one tool call to a session.
type EnvStepRequest struct {
	Schema    int      `msgpack:"schema"`
	SessionID string   `msgpack:"session_id"`
	Call      ToolCall `msgpack:"call"`
}

// EnvStepReply is the environment's answer to one tool call.
type EnvStepReply struct {
	Schema      int                `msgpack:"schema"`
	Observation string             `msgpack:"observation"`
	Admissible  []ToolCall         `msgpack:"admissible"`
	Done        bool               `msgpack:"done"`
	Reward      float64            `msgpack:"reward"`
	Status      string             `msgpack:"status"`
	Turn        int                `msgpack:"turn"`
	Metrics     map[string]float64 `msgpack:"metrics,omitempty"`
}

// EnvStartBatch asks one env host for several sessions at once (SubjectEnvStartBatch). The host answers
// with EnvBatchReply messages whose results name the start by its index in Starts.
type EnvStartBatch struct {
	Schema int               `msgpack:"schema"`
	Starts []EnvStartRequest `msgpack:"starts"`
}

// EnvStepBatch sends one call to each of several sessions of one host (SubjectEnvStepBatch). Each step
// runs on its own; the host answers with one or more EnvBatchReply messages to the request's reply
// subject, each carrying the results ready by then, so a slow session holds up no other.
type EnvStepBatch struct {
	Schema int              `msgpack:"schema"`
	Steps  []EnvStepRequest `msgpack:"steps"`
}

// EnvBatchReply carries results of an EnvStartBatch or EnvStepBatch, each naming its call by index.
type EnvBatchReply struct {
	Schema  int              `msgpack:"schema"`
	Results []EnvBatchResult `msgpack:"results"`
}

// EnvBatchResult is the answer to one call of a batch: its reply, or an error as a single call's error
// reply would carry it (Error: the catalogued text and detail; Code: its wire code).
type EnvBatchResult struct {
	Index int            `msgpack:"index"`
	Start *EnvStartReply `msgpack:"start,omitempty"`
	Step  *EnvStepReply  `msgpack:"step,omitempty"`
	Error string         `msgpack:"error,omitempty"`
	Code  string         `msgpack:"code,omitempty"`
}

// EnvCancelRequest ends a session early.
type EnvCancelRequest struct {
	Schema    int    `msgpack:"schema"`
	SessionID string `msgpack:"session_id"`
}

// EnvCancelReply acknowledges a cancel.
type EnvCancelReply struct {
	Schema int `msgpack:"schema"`
}

// Turn is one action of an episode: what the policy saw, what it chose, with which log-probability,
// and which policy (pool member and version) produced it.
type Turn struct {
	Observation string   `msgpack:"observation"`
	Candidates  []string `msgpack:"candidates"`
	Chosen      int      `msgpack:"chosen"`
	LogProb     float64  `msgpack:"logprob"`
	Version     int64    `msgpack:"version"`
	Policy      string   `msgpack:"policy"`
}

// Episode is one finished trajectory, published by rollout with Nats-Msg-Id = ID.
type Episode struct {
	Schema       int     `msgpack:"schema"`
	ID           string  `msgpack:"id"`
	GroupID      string  `msgpack:"group_id"`
	GroupSize    int     `msgpack:"group_size"`
	Task         string  `msgpack:"task"`
	Split        string  `msgpack:"split"`
	Seed         uint64  `msgpack:"seed"`
	Instruction  string  `msgpack:"instruction"`
	Turns        []Turn  `msgpack:"turns"`
	Reward       float64 `msgpack:"reward"`
	Status       string  `msgpack:"status"`
	InfraFailure bool    `msgpack:"infra_failure"`
	Failure      string  `msgpack:"failure,omitempty"`
	RolloutID    string  `msgpack:"rollout_id"`
	HostID       string  `msgpack:"host_id"`
	StartedAt    int64   `msgpack:"started_at"` // unix nanoseconds
	FinishedAt   int64   `msgpack:"finished_at"`
	// StartVersion is the current-policy version when the episode was admitted; staleness is measured from it.
	StartVersion int64 `msgpack:"start_version"`
}

// TurnsWithin applies the staleness bound eta at trainer version v to each turn, by the version that
// produced it (turns of the policy pool's deliberately older members, cross-policy sampling's stale copy
// and a saved checkpoint, are not judged). from is the first turn after
// the last current-policy turn older than the bound; since is the version the episode's staleness counts
// from, that of its first current-policy turn from there (StartVersion when there is none); ok says
// whether anything of the episode is within the bound.
func (e *Episode) TurnsWithin(v int64, eta int) (from int, since int64, ok bool) {
	for i := len(e.Turns) - 1; i >= 0; i-- {
		if t := &e.Turns[i]; t.judged() && v-t.Version > int64(eta) {
			from = i + 1
			break
		}
	}
	if from == len(e.Turns) && from > 0 {
		return from, e.StartVersion, false
	}
	since = e.StartVersion
	for i := from; i < len(e.Turns); i++ {
		if e.Turns[i].judged() {
			since = e.Turns[i].Version
			break
		}
	}
	return from, since, v-since <= int64(eta)
}

// judged says whether a turn's version counts toward staleness: the current policy produced it.
func (t *Turn) judged() bool { return t.Policy != PolicyStale && t.Policy != PolicyCheckpoint }

// Success reports whether the episode solved its task.
func (e *Episode) Success() bool { return e.Status == StatusCompleted && e.Reward >= 1 }

// Validate rejects an episode that no stage should act on.
func (e *Episode) Validate() error {
	switch {
	case e.Schema != SchemaVersion:
		return fmt.Errorf("%w: episode schema %d, want %d", ErrSchema, e.Schema, SchemaVersion)
	case e.ID == "" || e.GroupID == "" || e.Task == "":
		return fmt.Errorf("%w: episode needs id, group_id and task", ErrMalformed)
	case e.GroupSize < 1 || e.GroupSize > MaxGroupSize:
		return fmt.Errorf("%w: episode %s has group_size %d (1 to %d)", ErrMalformed, e.ID, e.GroupSize, MaxGroupSize)
	case math.IsNaN(e.Reward) || math.IsInf(e.Reward, 0):
		return fmt.Errorf("%w: episode %s has reward %v", ErrBadNumber, e.ID, e.Reward)
	}
	for i, t := range e.Turns {
		if t.Chosen < 0 || t.Chosen >= len(t.Candidates) {
			return fmt.Errorf("%w: episode %s turn %d chose %d of %d candidates", ErrMalformed, e.ID, i, t.Chosen, len(t.Candidates))
		}
		if math.IsNaN(t.LogProb) || math.IsInf(t.LogProb, 0) || t.LogProb > 1e-9 {
			return fmt.Errorf("%w: episode %s turn %d has logprob %v", ErrBadNumber, e.ID, i, t.LogProb)
		}
	}
	return nil
}

// Batch is a set of complete groups released by the replay-buffer, published with Nats-Msg-Id = ID.
type Batch struct {
	Schema   int       `msgpack:"schema"`
	ID       string    `msgpack:"id"`
	Episodes []Episode `msgpack:"episodes"`
	// TrainerVersion is the policy version the batch was composed for: the one the replay-buffer saw when
	// it released the batch plus the batches released ahead of it and not yet applied; staleness is
	// counted against it.
	TrainerVersion int64 `msgpack:"trainer_version"`
	ReleasedAt     int64 `msgpack:"released_at"`
}

// TrainEpisode is an episode with one advantage per turn (on the wire as one packed blob, see Float64s).
type TrainEpisode struct {
	Episode    Episode  `msgpack:"episode"`
	Advantages Float64s `msgpack:"advantages"`
}

// TaskStat summarizes one task family's episodes in a batch.
type TaskStat struct {
	Episodes   int     `msgpack:"episodes" json:"episodes"`
	Successes  int     `msgpack:"successes" json:"successes"`
	MeanReward float64 `msgpack:"mean_reward" json:"mean_reward"`
	AdvMean    float64 `msgpack:"adv_mean" json:"adv_mean"`
	AdvStd     float64 `msgpack:"adv_std" json:"adv_std"`
}

// TrainBatch is a batch with advantages, published by the advantage-normalizer with Nats-Msg-Id = ID.
type TrainBatch struct {
	Schema         int                 `msgpack:"schema"`
	ID             string              `msgpack:"id"`
	Episodes       []TrainEpisode      `msgpack:"episodes"`
	Tasks          map[string]TaskStat `msgpack:"tasks"`
	TrainerVersion int64               `msgpack:"trainer_version"`
}

// PolicyVersion is the record under BucketPolicy/KeyPolicyCurrent that rollout watches.
type PolicyVersion struct {
	Schema          int    `msgpack:"schema"`
	Version         int64  `msgpack:"version"`
	Object          string `msgpack:"object"`
	Size            int64  `msgpack:"size"`
	SHA256          string `msgpack:"sha256"`
	EpisodesTrained int64  `msgpack:"episodes_trained"`
	// EpisodesConsumed counts every admitted episode the trainer has taken off the mesh up to this
	// version: trained, or dropped as stale. The staleness gate lets (eta+1)·B more be in flight.
	EpisodesConsumed int64  `msgpack:"episodes_consumed"`
	BatchID          string `msgpack:"batch_id"`
	PublishedAt      int64  `msgpack:"published_at"`
}

// GroupStart announces an admitted group before its episodes start (StreamGroups). The replay-buffer
// holds it with the group: if the members never all arrive (their rollout died), the group times out
// and its missing admissions are refunded, so the staleness gate does not lose room for good.
type GroupStart struct {
	Schema       int    `msgpack:"schema"`
	GroupID      string `msgpack:"group_id"`
	Task         string `msgpack:"task"`
	GroupSize    int    `msgpack:"group_size"`
	StartVersion int64  `msgpack:"start_version"`
	RolloutID    string `msgpack:"rollout_id"`
	StartedAt    int64  `msgpack:"started_at"`
}

// Validate rejects a marker the replay-buffer cannot account for.
func (g *GroupStart) Validate() error {
	switch {
	case g.Schema != SchemaVersion:
		return fmt.Errorf("%w: group start schema %d, want %d", ErrSchema, g.Schema, SchemaVersion)
	case g.GroupID == "":
		return fmt.Errorf("%w: group start needs group_id", ErrMalformed)
	case g.GroupSize < 1 || g.GroupSize > MaxGroupSize:
		return fmt.Errorf("%w: group start %s has group_size %d (1 to %d)", ErrMalformed, g.GroupID, g.GroupSize, MaxGroupSize)
	}
	return nil
}

// MaxHeartbeatGroups is the most group ids one RolloutHeartbeat lists; a replica with more open groups
// sends several heartbeats per beat.
const MaxHeartbeatGroups = 4096

// RolloutHeartbeat is a rollout replica's periodic list of the groups it has admitted and not yet finished
// publishing (SubjectRolloutHeartbeat); a replica with more than MaxHeartbeatGroups splits its list over
// several messages, each standing alone.
type RolloutHeartbeat struct {
	Schema    int      `msgpack:"schema"`
	RolloutID string   `msgpack:"rollout_id"`
	Groups    []string `msgpack:"groups"`
	SentAt    int64    `msgpack:"sent_at"`
	// Instance is the replica's run token (a Token, new each time it starts): the key of its last claim
	// in Admission.Claims, and the last token of the subject of its group start markers (empty from
	// older releases).
	Instance string `msgpack:"instance,omitempty"`
}

// Validate rejects a heartbeat the replay-buffer cannot use.
func (h *RolloutHeartbeat) Validate() error {
	switch {
	case h.Schema != SchemaVersion:
		return fmt.Errorf("%w: rollout heartbeat schema %d, want %d", ErrSchema, h.Schema, SchemaVersion)
	case h.RolloutID == "":
		return fmt.Errorf("%w: rollout heartbeat needs rollout_id", ErrMalformed)
	case len(h.Groups) > MaxHeartbeatGroups:
		return fmt.Errorf("%w: rollout heartbeat of %s lists %d groups, at most %d", ErrMalformed, h.RolloutID, len(h.Groups), MaxHeartbeatGroups)
	case h.Instance != "" && !Token(h.Instance):
		return fmt.Errorf("%w: rollout heartbeat of %s has instance %q (letters, digits, '-' and '_', at most %d)", ErrMalformed, h.RolloutID, h.Instance, MaxTokenLen)
	}
	for _, g := range h.Groups {
		if g == "" {
			return fmt.Errorf("%w: rollout heartbeat of %s lists an empty group id", ErrMalformed, h.RolloutID)
		}
	}
	return nil
}

// Admission is the staleness gate's counter under BucketAdmission/KeyAdmission, updated by compare-and-set.
// Started counts training episodes admitted by all rollout replicas; Refunded counts those that will never
// reach the trainer (infrastructure failures, staleness drops), so they do not hold the gate shut.
// RefundPass is the last of the replay-buffer's numbered refunds applied (GroupRefund.Pass), written with
// it: whether a refund whose reply was lost was applied can be read back. RefundOwner is the run token of
// the replay-buffer that numbers the passes, set when it starts (fencing the one before it out: a pass is
// applied only by the owner), and DeadPasses the passes no buffer may apply any more, one for each start
// (the pass after the one then applied, which the buffer before may have numbered and recorded but never
// applied), the last MaxDeadPasses of them. Other writers keep these fields as they are.
//
// Claims holds each rollout instance's last claim (by RolloutHeartbeat.Instance), written in the claim's
// compare-and-set: a replica killed after its claim and before its group's start marker leaves a trace of
// the admissions it took, which the replay-buffer finds once the instance has gone silent, and for which
// it publishes the marker itself (the marker's subject, SubjectGroupStartOf(instance), tells whether the
// replica did). An instance that stops cleanly removes its claim; the replay-buffer removes those of
// instances gone silent once their marker is out.
type Admission struct {
	Schema      int                       `msgpack:"schema"`
	Started     int64                     `msgpack:"started"`
	Refunded    int64                     `msgpack:"refunded"`
	RefundPass  uint64                    `msgpack:"refund_pass,omitempty"`
	RefundOwner string                    `msgpack:"refund_owner,omitempty"`
	DeadPasses  []uint64                  `msgpack:"dead_passes,omitempty"`
	Claims      map[string]AdmissionClaim `msgpack:"claims,omitempty"`
}

// AdmissionClaim is a rollout instance's last claim (Admission.Claims): the group it admitted, and what its
// start marker says.
type AdmissionClaim struct {
	GroupID      string `msgpack:"group_id"`
	Task         string `msgpack:"task,omitempty"`
	GroupSize    int    `msgpack:"group_size"`
	StartVersion int64  `msgpack:"start_version"`
	RolloutID    string `msgpack:"rollout_id"`
	ClaimedAt    int64  `msgpack:"claimed_at"`
}

// Start is the start marker of the claim's group.
func (c AdmissionClaim) Start() GroupStart {
	return GroupStart{Schema: SchemaVersion, GroupID: c.GroupID, Task: c.Task, GroupSize: c.GroupSize, StartVersion: c.StartVersion,
		RolloutID: c.RolloutID, StartedAt: c.ClaimedAt}
}

// MaxDeadPasses bounds Admission.DeadPasses: a buffer's last record would have to reach the server after
// that many later buffers started for a pass dropped from it to be needed.
const MaxDeadPasses = 16

// GroupRefund is the replay-buffer's record under BucketRefunds/RefundKey(group id): the admissions of the
// group it has given back to the staleness gate so far. A buffer that takes over (after a restart, or
// standing by) reads the records, so the members it is delivered again do not give the same admissions
// back a second time. A record is written before its refund: Refunded counts Pending, what refund pass
// Pass gives back, and the pass was applied if and only if it is at most Admission.RefundPass and not one
// of Admission.DeadPasses (a record without a pass was written after its refund), as long as the buffer
// that wrote it was one of the last MaxDeadPasses to start.
type GroupRefund struct {
	Schema   int    `msgpack:"schema"`
	Refunded int    `msgpack:"refunded"`
	Pending  int    `msgpack:"pending,omitempty"`
	Pass     uint64 `msgpack:"pass,omitempty"`
}

// Given is what the record says was given back for its group, once the counter holds refund pass applied
// (Admission.RefundPass) and the dead passes dead (Admission.DeadPasses).
func (r GroupRefund) Given(applied uint64, dead []uint64) int {
	if !r.Applied(applied, dead) {
		return max(0, r.Refunded-r.Pending)
	}
	return r.Refunded
}

// Applied reports whether the record's pass was applied (see Given); a record without a pass was.
func (r GroupRefund) Applied(applied uint64, dead []uint64) bool {
	return r.Pass == 0 || (r.Pass <= applied && !slices.Contains(dead, r.Pass))
}

// AdmissionClosed is the replay-buffer's mark under BucketAdmission/KeyAdmissionClosed: no batch can take
// a group admitted at a version below Below any more, because the buffer has composed the last batch that
// could (for version Below - 1 + eta). Rollouts stop playing the members of such groups still playing
// (proto.StatusStale). The mark only rises.
type AdmissionClosed struct {
	Schema int   `msgpack:"schema"`
	Below  int64 `msgpack:"below"`
}

// TrainStep is the trainer's event after each applied batch.
type TrainStep struct {
	Schema          int                 `msgpack:"schema" json:"-"`
	Version         int64               `msgpack:"version" json:"version"`
	BatchID         string              `msgpack:"batch_id" json:"batch_id"`
	Episodes        int                 `msgpack:"episodes" json:"episodes"`
	EpisodesTrained int64               `msgpack:"episodes_trained" json:"episodes_trained"`
	Loss            float64             `msgpack:"loss" json:"loss"`
	ClipFraction    float64             `msgpack:"clip_fraction" json:"clip_fraction"`
	MaxStaleness    int64               `msgpack:"max_staleness" json:"max_staleness"`
	Tasks           map[string]TaskStat `msgpack:"tasks" json:"tasks"`
	At              int64               `msgpack:"at" json:"at"`
}

// TrainedGroups is the trainer's record of the groups one policy version trained for the first time
// (StreamTrainedGroups), stored before that version's checkpoint. A restarted trainer rebuilds the groups
// it must refuse from the records of the versions up to its checkpoint's, the last record of each version
// counting (an earlier one is of an attempt that crashed before its checkpoint).
type TrainedGroups struct {
	Schema  int   `msgpack:"schema"`
	Version int64 `msgpack:"version"`
	// Keys are the groups' 64-bit keys (FNV-1a of the group id), 8 bytes each, little-endian.
	Keys []byte `msgpack:"keys"`
}
