package http

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The body is read as the API reads it: decoded from the charset the
// Content-Type names, as Django does (the policy's evaluator then matches
// JSON keys exactly and takes the last of duplicates, as Python's json
// module does). Where capgate cannot be sure it reads the body as the API
// would, it says so (policy.Request.BodyUnreadable) and the call is
// counted, never passed uncounted.

// decodeCharset returns body as UTF-8 the way the API decodes it: with the
// charset parameter of contentType (any Python codec name; the last one
// given), UTF-8 by default. ok is false for a charset capgate does not
// decode, or a body that is not valid in it: the caller gates such a call as
// bulk rather than guess. A leading UTF-8 byte-order mark is dropped
// (Python's utf-8-sig does; plain utf-8 makes the API refuse the body, and
// reading it anyway only over-counts).
func decodeCharset(contentType string, body []byte) (_ []byte, ok bool) {
	cs := normalizeCodec(charsetOf(contentType))
	if asciiCodecs[cs] {
		// JSON's structure reads the same byte for byte.
		return bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), true
	}
	switch cs {
	case "utf_16", "utf16", "u16":
		return decodeUTF16(body, true, binary.LittleEndian)
	case "utf_16_le", "utf_16le", "utf16le", "unicodelittleunmarked":
		return decodeUTF16(body, false, binary.LittleEndian)
	case "utf_16_be", "utf_16be", "utf16be", "unicodebigunmarked":
		return decodeUTF16(body, false, binary.BigEndian)
	case "utf_32", "utf32", "u32":
		return decodeUTF32(body, true, binary.LittleEndian)
	case "utf_32_le", "utf_32le", "utf32le":
		return decodeUTF32(body, false, binary.LittleEndian)
	case "utf_32_be", "utf_32be", "utf32be":
		return decodeUTF32(body, false, binary.BigEndian)
	}
	return nil, false
}

// asciiCodecs are the (normalized) Python codec names capgate reads byte
// for byte: UTF-8 and the ASCII-compatible single-byte charsets that map
// ASCII to itself. "" is the default, UTF-8.
var asciiCodecs = map[string]bool{
	"": true, "utf_8": true, "utf8": true, "u8": true, "utf": true, "utf8_ucs2": true, "utf8_ucs4": true,
	"cp65001": true, "utf_8_sig": true, "utf8_sig": true, "ascii": true, "us_ascii": true, "646": true,
	"us": true, "iso646_us": true, "ansi_x3.4_1968": true, "latin_1": true, "latin1": true, "l1": true,
	"iso_8859_1": true, "iso8859_1": true, "8859": true, "cp819": true, "iso_ir_100": true,
}

// asciiCharset reports whether the charset a Content-Type names reads
// ASCII as ASCII, so the query, which Django decodes in the request's
// charset, reads as capgate reads it.
func asciiCharset(contentType string) bool {
	return asciiCodecs[normalizeCodec(charsetOf(contentType))]
}

// charsetOf returns the last charset parameter of a Content-Type, read as
// Python's cgi.parse_header (Django's) reads it: parameters split on ";"
// outside double quotes, names lower-cased, values trimmed and unquoted.
func charsetOf(contentType string) string {
	var cs string
	params := contentType
	first := true
	for params != "" || first {
		// One parameter: up to a ";" with an even number of unescaped
		// quotes before it.
		end := -1
		for i := 0; i < len(params); i++ {
			if params[i] == ';' && (strings.Count(params[:i], `"`)-strings.Count(params[:i], `\"`))%2 == 0 {
				end = i
				break
			}
		}
		p := params
		if end >= 0 {
			p, params = params[:end], params[end+1:]
		} else {
			params = ""
		}
		if first {
			first = false // the media type itself
			continue
		}
		name, val, ok := strings.Cut(p, "=")
		if !ok || strings.ToLower(strings.TrimSpace(name)) != "charset" {
			continue
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = strings.ReplaceAll(strings.ReplaceAll(val[1:len(val)-1], `\\`, `\`), `\"`, `"`)
		}
		cs = val
	}
	return cs
}

// normalizeCodec folds a codec name as Python's codec registry does:
// lower case, every run of characters other than letters, digits and "."
// turned into one "_", trimmed of "_".
func normalizeCodec(name string) string {
	var b strings.Builder
	pending := false
	for _, r := range strings.ToLower(name) {
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.') {
			if pending && b.Len() > 0 {
				b.WriteByte('_')
			}
			pending = false
			b.WriteRune(r)
			continue
		}
		pending = true
	}
	return b.String()
}

func decodeUTF16(b []byte, bom bool, order binary.ByteOrder) ([]byte, bool) {
	if bom && len(b) >= 2 {
		switch {
		case b[0] == 0xff && b[1] == 0xfe:
			b, order = b[2:], binary.LittleEndian
		case b[0] == 0xfe && b[1] == 0xff:
			b, order = b[2:], binary.BigEndian
		}
	}
	if len(b)%2 != 0 {
		return nil, false
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = order.Uint16(b[2*i:])
	}
	return []byte(string(utf16.Decode(u))), true
}

func decodeUTF32(b []byte, bom bool, order binary.ByteOrder) ([]byte, bool) {
	if bom && len(b) >= 4 {
		switch {
		case b[0] == 0xff && b[1] == 0xfe && b[2] == 0 && b[3] == 0:
			b, order = b[4:], binary.LittleEndian
		case b[0] == 0 && b[1] == 0 && b[2] == 0xfe && b[3] == 0xff:
			b, order = b[4:], binary.BigEndian
		}
	}
	if len(b)%4 != 0 {
		return nil, false
	}
	out := make([]byte, 0, len(b)/4)
	for i := 0; i < len(b); i += 4 {
		r := rune(order.Uint32(b[i:]))
		if !utf8.ValidRune(r) {
			return nil, false
		}
		out = utf8.AppendRune(out, r)
	}
	return out, true
}
