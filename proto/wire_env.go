package proto

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Hand-written codecs of the env messages a step batch is made of (EnvStepRequest, EnvStepReply and their
// ToolCalls), which every turn of every episode sends and receives, and of the EnvStartReply (with its
// Messages and Tools) each episode opens with. Like those of wire.go they write and
// read exactly what the struct tags make the reflecting codec write and read; wire_test.go and the golden
// fixtures hold them to it.

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c ToolCall) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(2)
	w.key("name").str(c.Name)
	w.key("arguments").str(c.Arguments)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder: the map of ToolCall's tags, in any key order.
func (c *ToolCall) DecodeMsgpack(d *msgpack.Decoder) error {
	*c = ToolCall{}
	return decodeFields(d, "tool call", func(key string) (err error) {
		switch key {
		case "name":
			c.Name, err = d.DecodeString()
		case "arguments":
			c.Arguments, err = d.DecodeString()
		default:
			err = d.Skip()
		}
		return err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (r EnvStepRequest) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(3)
	w.key("schema").int(r.Schema)
	w.key("session_id").str(r.SessionID)
	w.key("call")
	if w.err == nil {
		w.err = r.Call.EncodeMsgpack(enc)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *EnvStepRequest) DecodeMsgpack(d *msgpack.Decoder) error {
	*r = EnvStepRequest{}
	return decodeFields(d, "step request", func(key string) (err error) {
		switch key {
		case "schema":
			r.Schema, err = d.DecodeInt()
		case "session_id":
			r.SessionID, err = d.DecodeString()
		case "call":
			err = r.Call.DecodeMsgpack(d)
		default:
			err = d.Skip()
		}
		return err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder (metrics omitted when empty, as its tag says).
func (r EnvStepReply) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 8
	if len(r.Metrics) == 0 {
		n--
	}
	w := wireWriter{enc: enc}
	w.mapLen(n)
	w.key("schema").int(r.Schema)
	w.key("observation").str(r.Observation)
	w.key("admissible")
	encodeList(&w, r.Admissible, ToolCall.EncodeMsgpack)
	w.key("done").bool(r.Done)
	w.key("reward").float64(r.Reward)
	w.key("status").str(r.Status)
	w.key("turn").int(r.Turn)
	if len(r.Metrics) > 0 {
		w.key("metrics").mapLen(len(r.Metrics))
		for k, v := range r.Metrics {
			w.str(k)
			w.float64(v)
		}
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *EnvStepReply) DecodeMsgpack(d *msgpack.Decoder) error {
	*r = EnvStepReply{}
	return decodeFields(d, "step reply", func(key string) (err error) {
		switch key {
		case "schema":
			r.Schema, err = d.DecodeInt()
		case "observation":
			r.Observation, err = d.DecodeString()
		case "admissible":
			r.Admissible, err = decodeToolCalls(d)
		case "done":
			r.Done, err = d.DecodeBool()
		case "reward":
			r.Reward, err = d.DecodeFloat64()
		case "status":
			r.Status, err = decodeKnown(d, statuses)
		case "turn":
			r.Turn, err = d.DecodeInt()
		case "metrics":
			r.Metrics, err = decodeMetrics(d)
		default:
			err = d.Skip()
		}
		return err
	})
}

// decodeFields reads a msgpack map (nil reads as no fields), calling field for each key.
func decodeFields(d *msgpack.Decoder, what string, field func(key string) error) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	var key [32]byte
	for i := 0; i < n; i++ {
		kn, err := decodeKey(d, &key)
		if err != nil {
			return err
		}
		if err := field(string(key[:kn])); err != nil {
			return fmt.Errorf("msgpack: %s field %q: %w", what, string(key[:kn]), err)
		}
	}
	return nil
}

func decodeToolCalls(d *msgpack.Decoder) ([]ToolCall, error) {
	return decodeList(d, (*ToolCall).DecodeMsgpack)
}

// encodeList writes items as a msgpack array (nil as nil), each with encode.
func encodeList[T any](w *wireWriter, items []T, encode func(T, *msgpack.Encoder) error) {
	if items == nil {
		w.null()
		return
	}
	w.arrayLen(len(items))
	for _, it := range items {
		if w.err == nil {
			w.err = encode(it, w.enc)
		}
	}
}

// decodeList reads a msgpack array (nil reads as a nil slice), each item with decode; a count larger than
// the bytes left is refused before anything is allocated (every item takes at least one byte).
func decodeList[T any](d *msgpack.Decoder, decode func(*T, *msgpack.Decoder) error) ([]T, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n == -1 {
		return nil, err
	}
	if err := checkRemaining(d, n); err != nil {
		return nil, err
	}
	out := make([]T, n)
	for i := range out {
		if err := decode(&out[i], d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeMetrics(d *msgpack.Decoder) (map[string]float64, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n == -1 {
		return nil, err
	}
	if err := checkRemaining(d, 2*n); err != nil {
		return nil, err
	}
	out := make(map[string]float64, n)
	for i := 0; i < n; i++ {
		k, err := d.DecodeString()
		if err != nil {
			return nil, err
		}
		if out[k], err = d.DecodeFloat64(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (b EnvStepBatch) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(2)
	w.key("schema").int(b.Schema)
	w.key("steps")
	encodeList(&w, b.Steps, EnvStepRequest.EncodeMsgpack)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (b *EnvStepBatch) DecodeMsgpack(d *msgpack.Decoder) error {
	*b = EnvStepBatch{}
	return decodeFields(d, "step batch", func(key string) error {
		switch key {
		case "schema":
			n, err := d.DecodeInt()
			b.Schema = n
			return err
		case "steps":
			var err error
			b.Steps, err = decodeList(d, (*EnvStepRequest).DecodeMsgpack)
			return err
		default:
			return d.Skip()
		}
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder (start, step, error and code omitted when empty, as
// their tags say; a start reply is written by the reflecting codec).
func (r EnvBatchResult) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 1
	for _, set := range []bool{r.Start != nil, r.Step != nil, r.Error != "", r.Code != ""} {
		if set {
			n++
		}
	}
	w := wireWriter{enc: enc}
	w.mapLen(n)
	w.key("index").int(r.Index)
	if r.Start != nil {
		w.key("start")
		if w.err == nil {
			w.err = enc.Encode(r.Start)
		}
	}
	if r.Step != nil {
		w.key("step")
		if w.err == nil {
			w.err = r.Step.EncodeMsgpack(enc)
		}
	}
	if r.Error != "" {
		w.key("error").str(r.Error)
	}
	if r.Code != "" {
		w.key("code").str(r.Code)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *EnvBatchResult) DecodeMsgpack(d *msgpack.Decoder) error {
	*r = EnvBatchResult{}
	return decodeFields(d, "batch result", func(key string) (err error) {
		switch key {
		case "index":
			r.Index, err = d.DecodeInt()
		case "start":
			if isNil, err := decodeNil(d); isNil || err != nil {
				return err
			}
			r.Start = new(EnvStartReply)
			err = d.Decode(r.Start)
		case "step":
			if isNil, err := decodeNil(d); isNil || err != nil {
				return err
			}
			r.Step = new(EnvStepReply)
			err = r.Step.DecodeMsgpack(d)
		case "error":
			r.Error, err = d.DecodeString()
		case "code":
			r.Code, err = d.DecodeString()
		default:
			err = d.Skip()
		}
		return err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (r EnvBatchReply) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(2)
	w.key("schema").int(r.Schema)
	w.key("results")
	encodeList(&w, r.Results, EnvBatchResult.EncodeMsgpack)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *EnvBatchReply) DecodeMsgpack(d *msgpack.Decoder) error {
	*r = EnvBatchReply{}
	return decodeFields(d, "batch reply", func(key string) error {
		switch key {
		case "schema":
			n, err := d.DecodeInt()
			r.Schema = n
			return err
		case "results":
			var err error
			r.Results, err = decodeList(d, (*EnvBatchResult).DecodeMsgpack)
			return err
		default:
			return d.Skip()
		}
	})
}

// decodeNil reads a nil if one comes next.
func decodeNil(d *msgpack.Decoder) (bool, error) {
	c, err := d.PeekCode()
	if err != nil || c != msgpcode.Nil {
		return false, err
	}
	return true, d.DecodeNil()
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m Message) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(2)
	w.key("role").str(m.Role)
	w.key("content").str(m.Content)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Message) DecodeMsgpack(d *msgpack.Decoder) error {
	*m = Message{}
	return decodeFields(d, "message", func(key string) (err error) {
		switch key {
		case "role":
			m.Role, err = d.DecodeString()
		case "content":
			m.Content, err = d.DecodeString()
		default:
			err = d.Skip()
		}
		return err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (t Tool) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(3)
	w.key("name").str(t.Name)
	w.key("description").str(t.Description)
	w.key("parameters").str(t.Parameters)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (t *Tool) DecodeMsgpack(d *msgpack.Decoder) error {
	*t = Tool{}
	return decodeFields(d, "tool", func(key string) (err error) {
		switch key {
		case "name":
			t.Name, err = d.DecodeString()
		case "description":
			t.Description, err = d.DecodeString()
		case "parameters":
			t.Parameters, err = d.DecodeString()
		default:
			err = d.Skip()
		}
		return err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder: a session's opening, one per episode in a start batch.
func (r EnvStartReply) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(9)
	w.key("schema").int(r.Schema)
	w.key("session_id").str(r.SessionID)
	w.key("host_id").str(r.HostID)
	w.key("messages")
	encodeList(&w, r.Messages, Message.EncodeMsgpack)
	w.key("tools")
	encodeList(&w, r.Tools, Tool.EncodeMsgpack)
	w.key("admissible")
	encodeList(&w, r.Admissible, ToolCall.EncodeMsgpack)
	w.key("max_turns").int(r.MaxTurns)
	w.key("instruction").str(r.Instruction)
	w.key("observation").str(r.Observation)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *EnvStartReply) DecodeMsgpack(d *msgpack.Decoder) error {
	*r = EnvStartReply{}
	return decodeFields(d, "start reply", func(key string) (err error) {
		switch key {
		case "schema":
			r.Schema, err = d.DecodeInt()
		case "session_id":
			r.SessionID, err = d.DecodeString()
		case "host_id":
			r.HostID, err = d.DecodeString()
		case "messages":
			r.Messages, err = decodeList(d, (*Message).DecodeMsgpack)
		case "tools":
			r.Tools, err = decodeList(d, (*Tool).DecodeMsgpack)
		case "admissible":
			r.Admissible, err = decodeToolCalls(d)
		case "max_turns":
			r.MaxTurns, err = d.DecodeInt()
		case "instruction":
			r.Instruction, err = d.DecodeString()
		case "observation":
			r.Observation, err = d.DecodeString()
		default:
			err = d.Skip()
		}
		return err
	})
}
