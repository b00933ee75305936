package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
)

// Port-forward over a websocket (the "v4.channel.k8s.io" protocol that the Python
// client, and so raylab, speaks; the API server passes such requests through to the
// kubelet as they are). virtual-kubelet's handler serves SPDY (kubectl) but gives
// websockets no ports, so they close at once; this follows the kubelet's own
// websocket handler (pkg/kubelet/cri/streaming/portforward/websocket.go).

const (
	v4BinaryWebsocketProtocol = "v4." + wsstream.ChannelWebSocketProtocol
	v4Base64WebsocketProtocol = "v4." + wsstream.Base64ChannelWebSocketProtocol
)

// portForwardMux sends websocket port-forwards to serveWebsocketPortForward and
// everything else to virtual-kubelet's routes.
func portForwardMux(pr *provider, idle time.Duration, rest http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", rest)
	mux.HandleFunc("/portForward/", func(w http.ResponseWriter, req *http.Request) {
		if !wsstream.IsWebSocketRequest(req) {
			rest.ServeHTTP(w, req)
			return
		}
		parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/portForward/"), "/")
		if len(parts) < 2 {
			http.Error(w, "expected /portForward/NAMESPACE/POD", http.StatusBadRequest)
			return
		}
		serveWebsocketPortForward(w, req, pr, parts[0], parts[1], idle)
	})
	return mux
}

func serveWebsocketPortForward(w http.ResponseWriter, req *http.Request, pr *provider, namespace, pod string, idle time.Duration) {
	var ports []int32
	for _, s := range req.URL.Query()["port"] {
		port, err := strconv.ParseUint(s, 10, 16)
		if err != nil || port == 0 {
			http.Error(w, fmt.Sprintf("invalid port %q", s), http.StatusBadRequest)
			return
		}
		ports = append(ports, int32(port))
	}
	if len(ports) == 0 {
		http.Error(w, `query parameter "port" is required`, http.StatusBadRequest)
		return
	}
	// Two channels per port: data (both ways) and errors (to the client).
	channels := make([]wsstream.ChannelType, 0, 2*len(ports))
	for range ports {
		channels = append(channels, wsstream.ReadWriteChannel, wsstream.WriteChannel)
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		"":                        {Binary: true, Channels: channels},
		v4BinaryWebsocketProtocol: {Binary: true, Channels: channels},
		v4Base64WebsocketProtocol: {Binary: false, Channels: channels},
	})
	conn.SetIdleTimeout(idle)
	_, streams, err := conn.Open(responsewriter.GetOriginal(w), req)
	if err != nil {
		log.Printf("port-forward %s/%s: %v", namespace, pod, err)
		return
	}
	defer conn.Close()
	var wg sync.WaitGroup
	for i, port := range ports {
		data, errs := streams[2*i], streams[2*i+1]
		// Each stream starts with its port, as a little-endian uint16.
		prefix := binary.LittleEndian.AppendUint16(nil, uint16(port))
		_, _ = data.Write(prefix)
		_, _ = errs.Write(prefix)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer data.Close()
			defer errs.Close()
			if err := pr.PortForward(context.Background(), namespace, pod, port, data); err != nil {
				fmt.Fprint(errs, err.Error())
			}
		}()
	}
	wg.Wait()
}
