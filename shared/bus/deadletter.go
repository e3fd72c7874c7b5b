package bus

import (
	"context"
	"fmt"

	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetter copies a refused message to the dead-letter stream with the reason, then terminates it,
// so a poison message neither blocks its stream nor disappears.
func DeadLetter(ctx context.Context, js jetstream.JetStream, stage string, msg jetstream.Msg, reason error) error {
	_, err := DeadLetterFirst(ctx, js, stage, msg, reason)
	return err
}

// DeadLetterFirst is DeadLetter that also reports whether this delivery stored the copy: false when an
// earlier delivery of the same message already had (its termination lost), within the stream's duplicate
// window. It holds even when the termination fails (err then is its error, and the message comes again):
// a stage that gives something back for what it dead-letters (admissions) does so only when first.
func DeadLetterFirst(ctx context.Context, js jetstream.JetStream, stage string, msg jetstream.Msg, reason error) (first bool, err error) {
	out := nats.NewMsg(proto.SubjectDeadLetterPrefix + stage)
	out.Data = msg.Data()
	out.Header.Set(proto.HeaderDeadLetterReason, reason.Error())
	out.Header.Set(proto.HeaderDeadLetterSubject, msg.Subject())
	if md, err := msg.Metadata(); err == nil {
		out.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s-%s-%d", stage, md.Stream, md.Sequence.Stream))
	}
	ack, err := js.PublishMsg(ctx, out)
	if err != nil {
		return false, fmt.Errorf("dead-letter: %w", err)
	}
	return !ack.Duplicate, msg.Term()
}

// PublishOnce publishes data with Nats-Msg-Id = id, so a retried publish is stored once.
func PublishOnce(ctx context.Context, js jetstream.JetStream, subject, id string, data []byte) (*jetstream.PubAck, error) {
	return js.Publish(ctx, subject, data, jetstream.WithMsgID(id))
}
