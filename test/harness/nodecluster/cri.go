package nodecluster

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

// criVersion is the CRI's Version call, the kubelet's first call to its
// runtime: a kubelet started before it answers exits at once.
const criVersion = "/runtime.v1.RuntimeService/Version"

// criReady reports whether the CRI plugin of the containerd at socket
// answers. containerd serves its own API (what ctr uses) before its CRI
// plugin has loaded its state, and until then every CRI call fails with
// "server is not initialized yet". The call's request and answer are
// empty messages: an empty VersionRequest is valid, and the answer's
// fields are kept as unknown fields.
func criReady(socket string) bool {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return conn.Invoke(ctx, criVersion, &emptypb.Empty{}, &emptypb.Empty{}) == nil
}
