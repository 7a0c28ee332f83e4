package event

import "time"

// ParseTimeMillis parses s as time.Parse(time.RFC3339Nano, s) does and returns
// it in epoch milliseconds, truncated like time.Time.UnixMilli. The common
// strict form is parsed here without allocating (time.Parse allocates a
// zone for any offset but Z and the local one); anything else goes to
// time.Parse itself, so that exactly what it accepts is accepted.
func ParseTimeMillis(s []byte) (int64, bool) {
	if ms, ok := parseRFC3339(s); ok {
		return ms, true
	}
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

// parseRFC3339 mirrors the fast path of time.Parse for RFC 3339 layouts:
// "2006-01-02T15:04:05", an optional '.' and digits, then "Z" or ±hh:mm.
func parseRFC3339(s []byte) (int64, bool) {
	if len(s) < len("2006-01-02T15:04:05") ||
		s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	year, ok1 := digits(s[0:4], 0, 9999)
	month, ok2 := digits(s[5:7], 1, 12)
	day, ok3 := digits(s[8:10], 1, 31)
	hour, ok4 := digits(s[11:13], 0, 23)
	minute, ok5 := digits(s[14:16], 0, 59)
	sec, ok6 := digits(s[17:19], 0, 59)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || day > daysIn(month, year) {
		return 0, false
	}
	s = s[19:]

	var ms int64
	if len(s) >= 2 && s[0] == '.' && isDigit(s[1]) {
		n := 1
		for n < len(s) && isDigit(s[n]) {
			if n <= 3 {
				ms = ms*10 + int64(s[n]-'0')
			}
			n++
		}
		for k := n; k <= 3; k++ {
			ms *= 10
		}
		s = s[n:]
	}

	var offset int64
	if len(s) != 1 || s[0] != 'Z' {
		if len(s) != len("-07:00") || (s[0] != '+' && s[0] != '-') || s[3] != ':' {
			return 0, false
		}
		hh, ok1 := digits(s[1:3], 0, 23)
		mm, ok2 := digits(s[4:6], 0, 59)
		if !ok1 || !ok2 {
			return 0, false
		}
		offset = int64(hh*60+mm) * 60
		if s[0] == '-' {
			offset = -offset
		}
	}

	secs := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec) - offset
	return secs*1000 + ms, true
}

// digits parses s as an unsigned decimal in [lo, hi].
func digits(s []byte, lo, hi int) (int, bool) {
	x := 0
	for _, c := range s {
		if !isDigit(c) {
			return 0, false
		}
		x = x*10 + int(c-'0')
	}
	return x, lo <= x && x <= hi
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to the given date of
// the proleptic Gregorian calendar (H. Hinnant's algorithm), for year >= 0.
func daysFromCivil(year, month, day int) int64 {
	if month <= 2 {
		year--
	}
	era := year / 400
	if year < 0 {
		era = (year - 399) / 400
	}
	yoe := year - era*400
	mp := (month + 9) % 12
	doy := (153*mp+2)/5 + day - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
