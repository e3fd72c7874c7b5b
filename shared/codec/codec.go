// Package codec is the msgpack wire codec of the mesh: size limits on the way out, schema checks on the way in.
package codec

import (
	"bytes"
	"fmt"
	"reflect"
	"sync"

	"github.com/jetrl/jetrl/proto"
	"github.com/vmihailenco/msgpack/v5"
)

// encoder is a msgpack encoder with the buffer it writes to, reused through encoders so that an encode
// allocates only its result, at its exact size, instead of a buffer grown by doubling.
type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}}

// maxPooledBuffer is the largest encode buffer kept for reuse (a batch is at most 8 MiB).
const maxPooledBuffer = 1 << 20

// Marshal encodes v as msgpack and refuses a result larger than limit bytes (0: no limit).
func Marshal(v any, limit int) ([]byte, error) {
	e := encoders.Get().(*encoder)
	e.buf.Reset()
	err := e.enc.Encode(v)
	n := e.buf.Len()
	tooLarge := limit > 0 && n > limit
	var b []byte
	if err == nil && !tooLarge {
		b = append(make([]byte, 0, n), e.buf.Bytes()...)
	}
	if e.buf.Cap() <= maxPooledBuffer {
		encoders.Put(e)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %v", proto.ErrMalformed, v, err)
	}
	if tooLarge {
		return nil, fmt.Errorf("%w: %T is %d bytes, limit %d", proto.ErrPayloadTooLarge, v, n, limit)
	}
	return b, nil
}

// decoder is a msgpack decoder with the reader it reads from, reused through decoders so that a decode
// allocates nothing but what it decodes.
type decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decoders = sync.Pool{New: func() any {
	d := &decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// Unmarshal decodes msgpack into v (a pointer to a proto message) and checks its Schema field.
func Unmarshal(data []byte, v any) error {
	d := decoders.Get().(*decoder)
	d.r.Reset(data)
	d.dec.Reset(&d.r) // a *bytes.Reader is read as is, without a bufio.Reader around it
	d.dec.UsePreallocateValues(true)
	err := d.dec.Decode(v)
	d.r.Reset(nil)
	decoders.Put(d)
	if err != nil {
		return fmt.Errorf("%w: decode %T: %v", proto.ErrMalformed, v, err)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.Struct {
		if f := rv.Elem().FieldByName("Schema"); f.IsValid() && f.CanInt() && f.Int() != proto.SchemaVersion {
			return fmt.Errorf("%w: %T has schema %d, this build reads %d", proto.ErrSchema, v, f.Int(), proto.SchemaVersion)
		}
	}
	return nil
}
