// Package codec is the msgpack wire codec of the mesh: size limits on the way out, schema checks on the way in.
package codec

import (
	"fmt"
	"reflect"

	"github.com/jetrl/jetrl/proto"
	"github.com/vmihailenco/msgpack/v5"
)

// Marshal encodes v as msgpack and refuses a result larger than limit bytes (0: no limit).
func Marshal(v any, limit int) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %v", proto.ErrMalformed, v, err)
	}
	if limit > 0 && len(b) > limit {
		return nil, fmt.Errorf("%w: %T is %d bytes, limit %d", proto.ErrPayloadTooLarge, v, len(b), limit)
	}
	return b, nil
}

// Unmarshal decodes msgpack into v (a pointer to a proto message) and checks its Schema field.
func Unmarshal(data []byte, v any) error {
	if err := msgpack.Unmarshal(data, v); err != nil {
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
