package beton

import (
	"encoding/json"
	"slices"
)

// Stats summarises a list of numbers.
type Stats struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Mean   float64 `json:"mean"`
	Max    float64 `json:"max"`
}

func statsOf(v []float64) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	slices.Sort(v)
	var sum float64
	for _, x := range v {
		sum += x
	}
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stats{Min: v[0], Median: med, Mean: sum / float64(len(v)), Max: v[len(v)-1]}
}

// FieldSummary describes one field.
type FieldSummary struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	TypeID uint8    `json:"type_id"`
	Offset int      `json:"offset"`
	Shape  []uint64 `json:"shape,omitempty"`
	DType  string   `json:"dtype,omitempty"`
}

// ImageSummary describes the values of one RGB image field.
type ImageSummary struct {
	Field  string         `json:"field"`
	Modes  map[string]int `json:"modes"`
	Width  Stats          `json:"width"`
	Height Stats          `json:"height"`
	Bytes  Stats          `json:"bytes"`
	Errors int            `json:"errors,omitempty"`
}

// Summary is what `ffcvfs info` reports about a file.
type Summary struct {
	File           string         `json:"file"`
	Size           int64          `json:"size"`
	Version        uint16         `json:"version"`
	NumSamples     uint64         `json:"num_samples"`
	PageSize       uint32         `json:"page_size"`
	AllocTablePtr  uint64         `json:"alloc_table_ptr"`
	RecordSize     int            `json:"record_size"`
	Fields         []FieldSummary `json:"fields"`
	AllocEntries   int            `json:"alloc_entries"`
	NamesIndex     uint64         `json:"names_index_bytes,omitempty"` // see PathField
	FirstPage      int64          `json:"first_page"`
	Pages          int            `json:"pages"`
	DataBytes      uint64         `json:"data_bytes"`
	BytesPerPage   Stats          `json:"bytes_used_per_page"`
	SamplesPerPage Stats          `json:"samples_per_page"`
	Images         []ImageSummary `json:"images,omitempty"`
}

// Summarize computes the Summary of f. It reads no sample data.
func Summarize(f *File) Summary {
	h := f.header
	s := Summary{
		File: f.name, Size: f.size, Version: h.Version, NumSamples: h.NumSamples,
		PageSize: h.PageSize, AllocTablePtr: h.AllocTablePtr, RecordSize: f.layout.RecordSize,
		AllocEntries: len(f.allocs), FirstPage: f.firstPage, Pages: f.numPages, NamesIndex: f.names.size,
	}
	for i, fd := range f.fields {
		s.Fields = append(s.Fields, FieldSummary{Name: fd.Name, Type: fd.Type.String(), TypeID: uint8(fd.Type),
			Offset: f.layout.Offsets[i], Shape: fd.Shape, DType: fd.DType})
	}
	used := make([]float64, f.numPages)
	for _, a := range f.allocs {
		if a.Size > 0 {
			used[int64(a.Ptr>>f.pageShift)-f.firstPage] += float64(a.Size)
			s.DataBytes += a.Size
		}
	}
	counts := make([]float64, f.numPages)
	for dp := range counts {
		counts[dp] = float64(f.pageStart[dp+1] - f.pageStart[dp])
	}
	s.BytesPerPage, s.SamplesPerPage = statsOf(used), statsOf(counts)
	for fi, fd := range f.fields {
		if fd.Type != TypeRGBImage {
			continue
		}
		is := ImageSummary{Field: fd.Name, Modes: map[string]int{}}
		var w, ht, by []float64
		for i := 0; i < f.NumSamples(); i++ {
			img, err := f.Image(i, fi)
			if err != nil {
				is.Errors++
				continue
			}
			is.Modes[img.Mode.String()]++
			w, ht, by = append(w, float64(img.Width)), append(ht, float64(img.Height)), append(by, float64(img.Size))
		}
		is.Width, is.Height, is.Bytes = statsOf(w), statsOf(ht), statsOf(by)
		s.Images = append(s.Images, is)
	}
	return s
}

// NamedValue is one field's value of a sample, for display.
type NamedValue struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// Describe returns sample i's values for display: scalars as themselves,
// images and other data as their metadata and location, JSON values decoded
// when readable. Problems are reported in place as an "error" entry.
func (f *File) Describe(i int) []NamedValue {
	out := make([]NamedValue, 0, len(f.fields))
	for fi, fd := range f.fields {
		var v any
		switch fd.Type {
		case TypeInt:
			v = f.Int(i, fi)
		case TypeFloat:
			v = f.Float(i, fi)
		case TypeRGBImage:
			if img, err := f.Image(i, fi); err != nil {
				v = map[string]any{"error": err.Error()}
			} else {
				v = map[string]any{"mode": img.Mode.String(), "width": img.Width, "height": img.Height, "ptr": img.Ptr, "size": img.Size}
			}
		default:
			a, err := f.Data(i, fi)
			if err != nil {
				v = map[string]any{"error": err.Error()}
				break
			}
			m := map[string]any{"ptr": a.Ptr, "size": a.Size}
			if fd.Type == TypeJSON && a.Size > 0 && a.Size <= 1<<16 {
				if b, err := f.ReadData(i, fi, nil); err == nil {
					var j any
					if json.Unmarshal(b[:len(b)-1], &j) == nil {
						m["json"] = j
					}
				}
			}
			v = m
		}
		out = append(out, NamedValue{Name: fd.Name, Value: v})
	}
	return out
}
