package cri

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The messages of the two CRI calls, as much of them as the prune reads,
// with their protobuf wire encoding written out by hand. The field numbers
// are those of k8s.io/cri-api's api.proto (runtime.v1); cri_test.go checks
// them against its generated types. Doing without the generated package
// keeps google.golang.org/grpc out of sweepd: linking it alone costs the
// node daemon about 5 MiB of resident memory.

// emptyRequest is VersionRequest (field 1, version, left empty: any version)
// and ListPodSandboxRequest (field 1, filter, left empty: every sandbox).
type emptyRequest struct{}

// versionResponse is runtime.v1.VersionResponse.
type versionResponse struct {
	RuntimeName, RuntimeVersion string // fields 2 and 3
}

// sandbox is runtime.v1.PodSandbox: id (1), metadata (2) and state (3).
type sandbox struct {
	ID string
	// PodUID is metadata.uid (PodSandboxMetadata field 2): the UID the
	// kubelet gave the runtime for the sandbox's pod.
	PodUID string
	Ready  bool // state SANDBOX_READY, the zero value
}

// listResponse is runtime.v1.ListPodSandboxResponse: items (1).
type listResponse struct {
	Items []sandbox
}

var errWire = errors.New("malformed CRI message")

// fields calls f for each field of a message; f consumes the value of the
// fields it knows and returns the bytes it used, or -1 to have it skipped.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, b []byte) int) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %w", errWire, protowire.ParseError(n))
		}
		b = b[n:]
		m := f(num, typ, b)
		if m < 0 {
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return fmt.Errorf("%w: field %d: %w", errWire, num, protowire.ParseError(m))
		}
		b = b[m:]
	}
	return nil
}

// str consumes a string field of the right wire type into dst.
func str(typ protowire.Type, b []byte, dst *string) int {
	if typ != protowire.BytesType {
		return -1
	}
	v, n := protowire.ConsumeBytes(b)
	if n >= 0 {
		*dst = string(v)
	}
	return n
}

func (m *versionResponse) unmarshal(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		switch num {
		case 2:
			return str(typ, b, &m.RuntimeName)
		case 3:
			return str(typ, b, &m.RuntimeVersion)
		}
		return -1
	})
}

func (m *listResponse) unmarshal(b []byte) error {
	var inner error
	err := fields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		if num != 1 || typ != protowire.BytesType {
			return -1
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return n
		}
		s, err := unmarshalSandbox(v)
		if err != nil && inner == nil {
			inner = err
		}
		m.Items = append(m.Items, s)
		return n
	})
	if err == nil {
		err = inner
	}
	return err
}

// unmarshalSandbox decodes one PodSandbox.
func unmarshalSandbox(b []byte) (sandbox, error) {
	s := sandbox{Ready: true}
	var meta error
	err := fields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		switch {
		case num == 1:
			return str(typ, b, &s.ID)
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n >= 0 && meta == nil {
				meta = fields(v, func(num protowire.Number, typ protowire.Type, b []byte) int {
					if num == 2 {
						return str(typ, b, &s.PodUID)
					}
					return -1
				})
			}
			return n
		case num == 3 && typ == protowire.VarintType:
			state, n := protowire.ConsumeVarint(b)
			s.Ready = state == 0
			return n
		}
		return -1
	})
	if err == nil {
		err = meta
	}
	return s, err
}

// codec replaces connect's protobuf codec for these messages only.
type codec struct{}

// Name is "proto": the gRPC content type the runtime expects.
func (codec) Name() string { return "proto" }

func (codec) Marshal(m any) ([]byte, error) {
	if _, ok := m.(*emptyRequest); !ok {
		return nil, fmt.Errorf("cri codec: cannot marshal %T", m)
	}
	return nil, nil // every field empty: no bytes
}

func (codec) Unmarshal(b []byte, m any) error {
	switch m := m.(type) {
	case *versionResponse:
		return m.unmarshal(b)
	case *listResponse:
		return m.unmarshal(b)
	}
	return fmt.Errorf("cri codec: cannot unmarshal into %T", m)
}
