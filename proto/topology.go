// Package proto is the contract of the jetrl mesh: every subject, stream, bucket, limit and message type,
// defined once. Services depend on this package and never on one another.
package proto

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// SchemaVersion is written into every message; a reader rejects a message whose schema it does not know.
// Schema 2 sends float slices (TrainEpisode.Advantages) as one packed little-endian blob; schema 1 sent
// them as msgpack arrays of float64.
const SchemaVersion = 2

// Subjects of the env function-call API (core NATS request/reply, served as a NATS micro service).
const (
	// EnvService is the micro service name every env host registers under.
	EnvService = "jetrl-env"
	// SubjectEnvStart is served by every env host in one queue group; the host that answers owns the session.
	SubjectEnvStart = "jetrl.env.start"
	// EnvQueueGroup is the queue group of SubjectEnvStart.
	EnvQueueGroup = "jetrl-env"
)

// SubjectEnvStartBatch takes an EnvStartBatch (several starts in one message) in the same queue group as
// SubjectEnvStart: one host answers every start of the batch.
const SubjectEnvStartBatch = "jetrl.env.starts"

// SubjectEnvStep is the step subject of one env host; the host id is part of every session id.
func SubjectEnvStep(hostID string) string { return "jetrl.env.host." + hostID + ".step" }

// SubjectEnvStepBatch takes an EnvStepBatch: the steps of several of one host's sessions in one message.
func SubjectEnvStepBatch(hostID string) string { return "jetrl.env.host." + hostID + ".steps" }

// SubjectEnvCancel is the cancel subject of one env host.
func SubjectEnvCancel(hostID string) string { return "jetrl.env.host." + hostID + ".cancel" }

// Durable data: JetStream streams. Each stream's subjects are listed in Streams below.
const (
	StreamEpisodes = "JETRL_EPISODES"
	StreamBatches  = "JETRL_BATCHES"
	StreamTrain    = "JETRL_TRAIN"
	// StreamDeadLetter keeps every message a stage refused (malformed, bad numbers), with the reason in a header.
	StreamDeadLetter = "JETRL_DEADLETTER"

	// SubjectEpisodesPrefix + task family; rollout publishes each finished episode there.
	SubjectEpisodesPrefix = "jetrl.episodes."
	SubjectEpisodesAll    = "jetrl.episodes.>"
	// SubjectGroupStart carries a GroupStart per admitted group, published by the rollout before its
	// episodes start, so the replay-buffer can account for a group whose rollout died before publishing.
	// A rollout publishes its markers under SubjectGroupStartOf(its instance), where the last one it
	// published can be looked up (Admission.Claims); older releases published on SubjectGroupStart itself.
	StreamGroups      = "JETRL_GROUPS"
	SubjectGroupStart = "jetrl.groups.start"
	// SubjectBatches carries groups assembled by the replay-buffer.
	SubjectBatches = "jetrl.batches"
	// SubjectTrain carries batches with advantages, ready for the trainer.
	SubjectTrain = "jetrl.train"
	// SubjectDeadLetterPrefix + stage name; HeaderDeadLetterReason says why the stage refused the message.
	SubjectDeadLetterPrefix = "jetrl.deadletter."
	HeaderDeadLetterReason  = "Jetrl-Deadletter-Reason"
	HeaderDeadLetterSubject = "Jetrl-Deadletter-Subject"
	// StreamTrainedGroups is the trainer's log of the groups it applied: a TrainedGroups record for each
	// policy version that trained a group, stored before that version's checkpoint, so the checkpoint need
	// not carry the keys of every remembered group. Bounded by count (MaxGroupsRemembered records hold at
	// least as many keys), not by age.
	StreamTrainedGroups  = "JETRL_TRAINED_GROUPS"
	SubjectTrainedGroups = "jetrl.trainer.groups"
)

// SubjectEpisodes is the subject an episode of one task family is published on.
func SubjectEpisodes(task string) string { return SubjectEpisodesPrefix + task }

// Durable consumer names, one per consuming stage.
const (
	ConsumerReplayBuffer = "replay-buffer"
	// ConsumerReplayBufferGroups reads StreamGroups.
	ConsumerReplayBufferGroups = "replay-buffer-groups"
	ConsumerNormalizer         = "advantage-normalizer"
	ConsumerTrainer            = "trainer"
)

// Events for progress displays, operators and audits. The trainer's step events are also kept in
// StreamEvents (Nats-Msg-Id = "train-v<version>"), so every applied batch has a durable record.
const (
	StreamEvents          = "JETRL_EVENTS"
	SubjectEventsAll      = "jetrl.events.>"
	SubjectEventTrainStep = "jetrl.events.trainer.step"
)

// TrainStepMsgID is the dedup id of the step event of one policy version.
func TrainStepMsgID(version int64) string { return "train-v" + strconv.FormatInt(version, 10) }

// SubjectRolloutHeartbeat carries each rollout replica's RolloutHeartbeat about once a second (core NATS):
// the groups it still plays. The replay-buffer releases a group early, without waiting for the group
// timeout, once its replica stops listing it (the replica died or restarted) or stops beating.
const SubjectRolloutHeartbeat = "jetrl.rollout.heartbeat"

// SubjectStatus is the status endpoint of one service (request/reply, JSON reply).
func SubjectStatus(service string) string { return "jetrl.status." + service }

// SubjectGroupStartOf is where the rollout instance instance (a Token) publishes its group start markers.
func SubjectGroupStartOf(instance string) string { return SubjectGroupStart + "." + instance }

// MaxTokenLen bounds a Token.
const MaxTokenLen = 64

// Token reports whether s can stand as one token of a subject: letters, digits, '-' and '_', at most
// MaxTokenLen of them.
func Token(s string) bool {
	if s == "" || len(s) > MaxTokenLen {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// KV buckets and Object Store buckets.
const (
	// BucketPolicy holds the current policy version record under KeyPolicyCurrent.
	BucketPolicy     = "jetrl_policy"
	KeyPolicyCurrent = "current"
	// BucketAdmission holds the staleness gate's episode counter under KeyAdmission.
	BucketAdmission = "jetrl_admission"
	KeyAdmission    = "episodes"
	// KeyAdmissionClosed, in BucketAdmission, holds the replay-buffer's AdmissionClosed mark.
	KeyAdmissionClosed = "closed"
	// BucketLeases holds the leases of services of which one instance may run at a time: under
	// KeyReplayBufferLease, "id/token" of the replay-buffer that consumes the episodes, renewed by
	// compare-and-set; another waits until it lapses.
	BucketLeases         = "jetrl_leases"
	KeyReplayBufferLease = "replay-buffer"
	// BucketRefunds holds the replay-buffer's GroupRefund records under RefundKey(group id), each kept
	// RefundsTTL after its last write.
	BucketRefunds = "jetrl_refunds"
	RefundsTTL    = time.Hour
	// BucketRun holds the settings of the run in force under KeyRunConfig, as a JSON object keyed by setting
	// name, so every service and operator sees the same values.
	BucketRun    = "jetrl_run"
	KeyRunConfig = "config"
	// BucketWeights is the Object Store of policy weights, one object per version.
	BucketWeights = "jetrl_weights"
	// BucketCheckpoints is the Object Store of trainer checkpoints.
	BucketCheckpoints = "jetrl_checkpoints"
	KeyCheckpoint     = "trainer"
)

// WeightsObject names the object that holds the weights of one policy version.
func WeightsObject(version int64) string { return "policy-" + strconv.FormatInt(version, 10) }

// Limits. A message larger than its limit is refused with ErrPayloadTooLarge before it is sent.
const (
	MaxEpisodeBytes    = 1 << 20 // one episode
	MaxBatchBytes      = 8 << 20 // one batch or train batch; needs max_payload >= this on the server
	MaxEnvMessageBytes = 256 << 10
	// MaxGroupSize bounds G, the episodes of one group: a group's size decides how many admissions the
	// replay-buffer gives back for it, so no message may claim more.
	MaxGroupSize = 4096
	// MaxEnvBatchItems is the most calls one EnvStartBatch or EnvStepBatch carries.
	MaxEnvBatchItems = 256
	// MaxEnvBatchBytes bounds one env batch request or reply message; a batch reply that would be larger
	// is sent as several.
	MaxEnvBatchBytes = 1 << 20
	ServerMaxPayload = 8 << 20 // max_payload the embedded server is started with
	DedupWindow      = 10 * time.Minute
	StreamMaxAge     = 24 * time.Hour
	StreamMaxBytes   = 2 << 30
	WeightsHistory   = 8 // versions kept in BucketWeights before the oldest are deleted
	// MaxUnackedEpisodes is the replay-buffer's episodes consumer MaxAckPending: no more episodes than
	// this can come back to a restarted buffer, which bounds what the buffer and the trainer must remember
	// of released and applied groups to recognise a repeat.
	MaxUnackedEpisodes = 1 << 15
	// MaxGroupsRemembered bounds the applied groups the trainer remembers to refuse a group twice. A group
	// reaches the trainer twice only when a replay-buffer released it and crashed before acking its
	// episodes; at most MaxUnackedEpisodes episodes are unacked, and a trainable group has at least 2.
	MaxGroupsRemembered = MaxUnackedEpisodes / 2
)

// StreamSpec is one JetStream stream of the mesh.
type StreamSpec struct {
	Name     string
	Subjects []string
	// Streams keep messages (limits retention) so that `jetrl replay` can read a run back.
	MaxBytes int64
	MaxAge   time.Duration
	// MaxMsgs bounds the messages kept (0: no bound but bytes and age).
	MaxMsgs int64
	MaxMsg  int32
}

// Streams lists every stream; shared/bus creates them idempotently.
var Streams = []StreamSpec{
	{Name: StreamEpisodes, Subjects: []string{SubjectEpisodesAll}, MaxBytes: StreamMaxBytes, MaxAge: StreamMaxAge, MaxMsg: MaxEpisodeBytes},
	{Name: StreamGroups, Subjects: []string{SubjectGroupStart, SubjectGroupStart + ".>"}, MaxBytes: StreamMaxBytes / 16, MaxAge: StreamMaxAge, MaxMsg: 4096},
	{Name: StreamBatches, Subjects: []string{SubjectBatches}, MaxBytes: StreamMaxBytes, MaxAge: StreamMaxAge, MaxMsg: MaxBatchBytes},
	{Name: StreamTrain, Subjects: []string{SubjectTrain}, MaxBytes: StreamMaxBytes, MaxAge: StreamMaxAge, MaxMsg: MaxBatchBytes},
	{Name: StreamEvents, Subjects: []string{SubjectEventsAll}, MaxBytes: StreamMaxBytes / 4, MaxAge: StreamMaxAge, MaxMsg: MaxEpisodeBytes},
	// Records of a crashed attempt at a version are stored again when the version is; the slack covers them.
	{Name: StreamTrainedGroups, Subjects: []string{SubjectTrainedGroups}, MaxBytes: StreamMaxBytes / 16, MaxMsgs: MaxGroupsRemembered + 1024, MaxMsg: MaxEpisodeBytes},
	{Name: StreamDeadLetter, Subjects: []string{SubjectDeadLetterPrefix + ">"}, MaxBytes: StreamMaxBytes, MaxAge: 7 * StreamMaxAge, MaxMsg: ServerMaxPayload},
}

// KVSpec is one KV bucket of the mesh.
type KVSpec struct {
	Bucket  string
	History uint8
	// TTL, when above 0, is how long a value is kept after its last write.
	TTL time.Duration
}

// KVBuckets lists every KV bucket.
var KVBuckets = []KVSpec{
	{Bucket: BucketPolicy, History: 16},
	{Bucket: BucketAdmission, History: 1},
	{Bucket: BucketRun, History: 8},
	{Bucket: BucketLeases, History: 1},
	{Bucket: BucketRefunds, History: 1, TTL: RefundsTTL},
}

// RefundKey is a group's key in BucketRefunds: a hash of its id, which may hold characters a key cannot.
func RefundKey(groupID string) string {
	h := sha256.Sum256([]byte(groupID))
	return "g" + hex.EncodeToString(h[:16])
}

// ObjectBuckets lists every Object Store bucket.
var ObjectBuckets = []string{BucketWeights, BucketCheckpoints}
