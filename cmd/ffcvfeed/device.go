package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/cudafeed"
)

// A build with the cuda tag links gorgonia.org/cu, whose init exits with
// status 1 when no NVIDIA driver or device is present: there, even
// ffcvfeed --help fails. A build without the tag links no CUDA and answers
// --device cuda:N with noCUDAHint.

// noCUDAHint is how a build without the cuda tag answers --device cuda:N.
const noCUDAHint = "ffcvfeed was built without CUDA support; rebuild with -tags cuda (see scripts/check-cuda-build.sh)"

func deviceFlag() cli.Flag {
	return &cli.StringFlag{Name: "device", Value: "cpu", Category: "output",
		Usage: "where batches go: cpu (shared memory) or cuda:N (then also to memory of CUDA device N, shared through CUDA IPC; needs a build with -tags cuda)"}
}

// deliveryDevice reads --device. A CUDA device is an error in a build
// without CUDA support; whether the device exists is checked later, by
// openDevice.
func deliveryDevice(c *cli.Context) (cudafeed.Device, error) {
	d, err := cudafeed.ParseDevice(c.String("device"))
	if err != nil {
		return d, cli.Exit("--device: "+err.Error(), 2)
	}
	if d.CUDA && !cudafeed.CUDASupport {
		return d, cli.Exit(fmt.Sprintf("--device %s: %s", d, noCUDAHint), 2)
	}
	return d, nil
}

// openDevice prepares the device side of ring: nothing for the host, a
// cudafeed.DeviceRing for a CUDA device. close must run after the server's
// Close and before the ring's.
func openDevice(d cudafeed.Device, ring *cudafeed.Ring) (slots cudafeed.DeviceSlots, close func() error, err error) {
	if !d.CUDA {
		return nil, func() error { return nil }, nil
	}
	dr, err := cudafeed.NewDeviceRing(ring, d.Ordinal)
	if err != nil {
		return nil, nil, err
	}
	return dr, dr.Close, nil
}
