package liveness

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The views watch pods and their Node in protobuf, as the kubelet does: the
// API server keeps one serialization of each object per encoding it sends,
// so a JSON watch beside the kubelet's would make it encode every pod event
// of the node and every Node update twice (issue 51). The view's own types
// decode the few fields they keep straight from the wire, by the field
// numbers of k8s.io/api's generated.proto (Pod: metadata 1, spec 2;
// PodSpec: terminationGracePeriodSeconds 4; Node: metadata 1, status 3;
// NodeStatus: nodeInfo 7; NodeSystemInfo: bootID 3,
// containerRuntimeVersion 6; lists: metadata 1, items 2), skipping the
// rest unread, so that sweepd links no typed API package
// (TestViewProtobuf checks them against k8s.io/api's own encoding).

// errProto is a message that is not what its field numbers say.
var errProto = errors.New("malformed protobuf")

// protoFields calls f with each field of the message b, its number, wire
// type and (for a varint) value or (for bytes) contents.
func protoFields(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %w", errProto, protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		var data []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %w", errProto, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, data); err != nil {
			return err
		}
	}
	return nil
}

// Reset implements the protobuf serializer's unmarshaler.
func (p *viewPod) Reset() { *p = viewPod{} }

// Unmarshal decodes a core/v1 Pod's metadata and termination grace.
func (p *viewPod) Unmarshal(b []byte) error {
	return protoFields(b, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return p.ObjectMeta.Unmarshal(data)
		case num == 2 && typ == protowire.BytesType:
			return protoFields(data, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				if num == 4 && typ == protowire.VarintType {
					g := int64(v)
					p.Spec.TerminationGracePeriodSeconds = &g
				}
				return nil
			})
		}
		return nil
	})
}

// Reset implements the protobuf serializer's unmarshaler.
func (l *viewPodList) Reset() { *l = viewPodList{} }

// Unmarshal decodes a core/v1 PodList.
func (l *viewPodList) Unmarshal(b []byte) error {
	return protoFields(b, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return l.ListMeta.Unmarshal(data)
		case num == 2 && typ == protowire.BytesType:
			var p viewPod
			if err := p.Unmarshal(data); err != nil {
				return err
			}
			l.Items = append(l.Items, p)
		}
		return nil
	})
}

// Reset implements the protobuf serializer's unmarshaler.
func (n *viewNode) Reset() { *n = viewNode{} }

// Unmarshal decodes a core/v1 Node's metadata and what identifies its
// machine.
func (n *viewNode) Unmarshal(b []byte) error {
	return protoFields(b, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return n.ObjectMeta.Unmarshal(data)
		case num == 3 && typ == protowire.BytesType:
			return protoFields(data, func(num protowire.Number, typ protowire.Type, _ uint64, info []byte) error {
				if num != 7 || typ != protowire.BytesType {
					return nil
				}
				return protoFields(info, func(num protowire.Number, typ protowire.Type, _ uint64, s []byte) error {
					switch {
					case num == 3 && typ == protowire.BytesType:
						n.Status.NodeInfo.BootID = string(s)
					case num == 6 && typ == protowire.BytesType:
						n.Status.NodeInfo.ContainerRuntimeVersion = string(s)
					}
					return nil
				})
			})
		}
		return nil
	})
}

// Reset implements the protobuf serializer's unmarshaler.
func (l *viewNodeList) Reset() { *l = viewNodeList{} }

// Unmarshal decodes a core/v1 NodeList.
func (l *viewNodeList) Unmarshal(b []byte) error {
	return protoFields(b, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return l.ListMeta.Unmarshal(data)
		case num == 2 && typ == protowire.BytesType:
			var n viewNode
			if err := n.Unmarshal(data); err != nil {
				return err
			}
			l.Items = append(l.Items, n)
		}
		return nil
	})
}
