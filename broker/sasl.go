package broker

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// advertiseSASLHandshakeV0 makes c advertise SaslHandshake from version 0,
// as Kafka does, where kfake advertises version 1 only. librdkafka (kcat,
// the Confluent clients) takes a broker without handshake v0 for one that
// cannot do SASL at all and refuses to connect; seeing v0 to 1 and
// SaslAuthenticate, it sends the v1 handshake and SaslAuthenticate, which
// kfake serves. So do kafka-go and the Java client. Only a client too old
// to know SaslAuthenticate would send v0, and kfake would hang up on it.
//
// ApiVersions is answered from kfake's own answer, read once from a
// throwaway cluster (the versions are the same for every cluster of the
// process), with that one change. Requests this cannot answer as kfake
// would (versions above 4, invalid client software names) are left to
// kfake.
func advertiseSASLHandshakeV0(c *kfake.Cluster) error {
	base, err := probeAPIVersions()
	if err != nil {
		return fmt.Errorf("read the broker's API versions: %w", err)
	}
	keys := slices.Clone(base.ApiKeys)
	for i := range keys {
		if keys[i].ApiKey == int16(kmsg.SASLHandshake) {
			keys[i].MinVersion = 0
		}
	}
	c.ControlKey(int16(kmsg.ApiVersions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r, ok := req.(*kmsg.ApiVersionsRequest)
		if !ok || r.Version > base.Version ||
			r.Version >= 3 && !(softwareName.MatchString(r.ClientSoftwareName) && softwareName.MatchString(r.ClientSoftwareVersion)) {
			return nil, nil, false
		}
		c.KeepControl()
		resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = slices.Clone(keys)
		resp.SupportedFeatures = base.SupportedFeatures
		resp.FinalizedFeaturesEpoch = base.FinalizedFeaturesEpoch
		resp.FinalizedFeatures = base.FinalizedFeatures
		return resp, nil, true
	})
	return nil
}

// softwareName is what Kafka accepts as a client software name or version
// in ApiVersions v3+.
var softwareName = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

// probeAPIVersions asks a throwaway in-memory kfake cluster for its
// ApiVersions answer, at version 4 (the last without the cluster checks of
// v5).
func probeAPIVersions() (*kmsg.ApiVersionsResponse, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	conn, err := net.DialTimeout("tcp", c.ListenAddrs()[0], 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))

	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 4
	req.ClientSoftwareName, req.ClientSoftwareVersion = "riskstream", "1"
	// Request header v2: size, key, version, correlation id, a null
	// client id, no tagged fields.
	msg := make([]byte, 4, 64)
	msg = binary.BigEndian.AppendUint16(msg, uint16(kmsg.ApiVersions))
	msg = binary.BigEndian.AppendUint16(msg, uint16(req.Version))
	msg = binary.BigEndian.AppendUint32(msg, 1)
	msg = binary.BigEndian.AppendUint16(msg, 0xffff)
	msg = append(msg, 0)
	msg = req.AppendTo(msg)
	binary.BigEndian.PutUint32(msg, uint32(len(msg)-4))
	if _, err := conn.Write(msg); err != nil {
		return nil, err
	}
	// ApiVersions answers with response header v0 (the correlation id
	// alone) at every version.
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, err
	}
	if len(body) < 4 {
		return nil, fmt.Errorf("short answer of %d bytes", len(body))
	}
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if err := resp.ReadFrom(body[4:]); err != nil {
		return nil, err
	}
	if resp.ErrorCode != 0 || !slices.ContainsFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool {
		return k.ApiKey == int16(kmsg.SASLHandshake)
	}) {
		return nil, fmt.Errorf("unexpected answer: error %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
	return resp, nil
}
