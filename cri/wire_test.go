package cri

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestWire decodes what k8s.io/cri-api's generated types encode, every
// field set, so that the hand-written field numbers stay right.
func TestWire(t *testing.T) {
	full := func(id string, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
		return &runtimeapi.PodSandbox{
			Id:             id,
			Metadata:       &runtimeapi.PodSandboxMetadata{Name: "web-0", Uid: "uid", Namespace: "default", Attempt: 3},
			State:          state,
			CreatedAt:      1764500000000000000,
			Labels:         map[string]string{"io.kubernetes.pod.name": "web-0"},
			Annotations:    map[string]string{"a": "b"},
			RuntimeHandler: "runc",
		}
	}
	data, err := proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{
		full("a", runtimeapi.PodSandboxState_SANDBOX_READY),
		full("b", runtimeapi.PodSandboxState_SANDBOX_NOTREADY),
		{Id: "c"}, // every other field absent: READY is the zero value
	}})
	if err != nil {
		t.Fatal(err)
	}
	var list listResponse
	if err := (codec{}).Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	if want := []sandbox{{"a", "uid", true}, {"b", "uid", false}, {"c", "", true}}; !reflect.DeepEqual(list.Items, want) {
		t.Fatalf("got %+v, want %+v", list.Items, want)
	}

	data, err = proto.Marshal(&runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "containerd", RuntimeVersion: "v2.2.0", RuntimeApiVersion: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	var v versionResponse
	if err := (codec{}).Unmarshal(data, &v); err != nil || v != (versionResponse{"containerd", "v2.2.0"}) {
		t.Fatalf("got %+v, %v", v, err)
	}

	// The requests are empty: what the generated types encode when empty.
	for _, m := range []proto.Message{&runtimeapi.VersionRequest{}, &runtimeapi.ListPodSandboxRequest{}} {
		want, _ := proto.Marshal(m)
		got, err := (codec{}).Marshal(&emptyRequest{})
		if err != nil || len(got) != 0 || len(want) != 0 {
			t.Fatalf("%T: got %x, want %x (%v)", m, got, want, err)
		}
	}

	// Truncated: an error, never a partial list.
	data, _ = proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{full("a", 0)}})
	for _, cut := range []int{1, 5, len(data) - 1} {
		var list listResponse
		if err := (codec{}).Unmarshal(data[:cut], &list); !errors.Is(err, errWire) {
			t.Errorf("cut at %d: err %v, items %+v", cut, err, list.Items)
		}
	}
}

// FuzzListResponse: whatever the runtime sends, the decoder does not panic,
// and whatever the generated code decodes, it decodes the same sandboxes
// with the same states. (It may accept more: it does not check UTF-8, and
// an ID that is not a sandbox ID fails the list later.)
func FuzzListResponse(f *testing.F) {
	seed := func(m proto.Message) {
		data, _ := proto.Marshal(m)
		f.Add(data)
	}
	seed(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{
		{Id: "a", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Metadata: &runtimeapi.PodSandboxMetadata{Name: "n"}, Labels: map[string]string{"k": "v"}},
		{Id: "b"},
	}})
	seed(&runtimeapi.ListPodSandboxResponse{})
	f.Add([]byte{0x0a, 0x02, 0x18, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		var got listResponse
		err := (codec{}).Unmarshal(data, &got)
		var want runtimeapi.ListPodSandboxResponse
		if proto.Unmarshal(data, &want) != nil {
			return
		}
		if err != nil {
			t.Fatalf("generated code decodes %x, the CRI client does not: %v", data, err)
		}
		if len(got.Items) != len(want.Items) {
			t.Fatalf("%x: %d items, generated code %d", data, len(got.Items), len(want.Items))
		}
		for i, it := range want.Items {
			if got.Items[i].ID != it.GetId() || got.Items[i].Ready != (it.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY) ||
				got.Items[i].PodUID != it.GetMetadata().GetUid() {
				t.Fatalf("%x: item %d %+v, generated code %v", data, i, got.Items[i], it)
			}
		}
	})
}
