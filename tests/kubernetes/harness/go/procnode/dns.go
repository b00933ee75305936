package main

import (
	"context"
	"encoding/binary"
	"io"
	"log"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// clusterDNS answers A queries for Service names as cluster DNS does:
// SVC.NS.svc.DOMAIN is the ClusterIP, or for a headless Service the addresses of its
// ready endpoints (all of them with publishNotReadyAddresses), read from the
// EndpointSlices the controller-manager keeps. Pods get it as their nameserver with
// the usual search path, so "NAME-head-svc.NS.svc" and "NAME-head-svc.NS" resolve too.
// Every other name is NXDOMAIN: nothing outside exists here.
type clusterDNS struct {
	domain    string // "cluster.local."
	services  corev1listers.ServiceLister
	endpoints discoverylisters.EndpointSliceLister
}

const dnsTTL = 5 // seconds, as CoreDNS's kubernetes plugin

func (d *clusterDNS) serve(ctx context.Context, addr string) error {
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		udp.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		udp.Close()
		tcp.Close()
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := d.answer(buf[:n]); reply != nil {
				_, _ = udp.WriteTo(reply, from)
			}
		}
	}()
	go func() {
		for {
			conn, err := tcp.Accept()
			if err != nil {
				return
			}
			go d.serveTCP(conn)
		}
	}()
	return nil
}

func (d *clusterDNS) serveTCP(conn net.Conn) {
	defer conn.Close()
	for {
		var size [2]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		reply := d.answer(msg)
		if reply == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(reply)))
		if _, err := conn.Write(append(out, reply...)); err != nil {
			return
		}
	}
}

func (d *clusterDNS) answer(query []byte) []byte {
	var parser dnsmessage.Parser
	header, err := parser.Start(query)
	if err != nil {
		return nil
	}
	question, err := parser.Question()
	if err != nil {
		return nil
	}
	reply := dnsmessage.Message{
		Header: dnsmessage.Header{
			ID: header.ID, Response: true, Authoritative: true,
			RecursionDesired: header.RecursionDesired, RCode: dnsmessage.RCodeSuccess,
		},
		Questions: []dnsmessage.Question{question},
	}
	addrs, known := d.lookup(strings.ToLower(question.Name.String()))
	if !known {
		reply.Header.RCode = dnsmessage.RCodeNameError
	} else if question.Type == dnsmessage.TypeA || question.Type == dnsmessage.TypeALL {
		for _, addr := range addrs {
			reply.Answers = append(reply.Answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{
					Name: question.Name, Type: dnsmessage.TypeA,
					Class: dnsmessage.ClassINET, TTL: dnsTTL,
				},
				Body: &dnsmessage.AResource{A: addr.As4()},
			})
		}
	}
	// Anything else (AAAA, ...) for a known name: NOERROR with no answers.
	out, err := reply.Pack()
	if err != nil {
		log.Printf("dns: %v", err)
		return nil
	}
	return out
}

// lookup returns the addresses of name and whether the name exists.
func (d *clusterDNS) lookup(name string) ([]netip.Addr, bool) {
	rest, ok := strings.CutSuffix(name, ".svc."+d.domain)
	if !ok {
		return nil, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 2 {
		return nil, false
	}
	svc, err := d.services.Services(parts[1]).Get(parts[0])
	if err != nil {
		return nil, false
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone && svc.Spec.ClusterIP != "" {
		addr, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil {
			return nil, true
		}
		return []netip.Addr{addr}, true
	}
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
	slices, err := d.endpoints.EndpointSlices(svc.Namespace).List(selector)
	if err != nil {
		return nil, true
	}
	var addrs []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, slice := range slices {
		if slice.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range slice.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if !ready && !svc.Spec.PublishNotReadyAddresses {
				continue
			}
			for _, a := range ep.Addresses {
				if addr, err := netip.ParseAddr(a); err == nil && !seen[addr] {
					seen[addr] = true
					addrs = append(addrs, addr)
				}
			}
		}
	}
	return addrs, true
}
