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
	out := nats.NewMsg(proto.SubjectDeadLetterPrefix + stage)
	out.Data = msg.Data()
	out.Header.Set(proto.HeaderDeadLetterReason, reason.Error())
	out.Header.Set(proto.HeaderDeadLetterSubject, msg.Subject())
	if md, err := msg.Metadata(); err == nil {
		out.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s-%s-%d", stage, md.Stream, md.Sequence.Stream))
	}
	if _, err := js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return msg.Term()
}

// PublishOnce publishes data with Nats-Msg-Id = id, so a retried publish is stored once.
func PublishOnce(ctx context.Context, js jetstream.JetStream, subject, id string, data []byte) (*jetstream.PubAck, error) {
	return js.Publish(ctx, subject, data, jetstream.WithMsgID(id))
}
