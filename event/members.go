package event

// Members calls fn with each top-level member of the JSON object line, in
// order: its name as written between the quotes (escapes left in), and
// where its value is, line[start:end]. It checks the whole line as Decode
// does, nested values included, and returns the *Error Decode gives a line
// that is not one valid JSON object (fn has then seen the members before
// the fault); nil otherwise. Tools that read events without deciding on
// them (riskstream produce's keys and --retime) scan them with it.
func (d *Decoder) Members(line []byte, fn func(name []byte, start, end int)) error {
	i, empty, err := d.openObject(line)
	if empty || err != nil {
		return err
	}
	for {
		if i >= len(line) || line[i] != '"' {
			return unexpected(line, i)
		}
		var nameEnd int
		nameEnd, _, err = scanString(line, i)
		if err != nil {
			return err
		}
		name := line[i+1 : nameEnd-1]
		if i = skipWS(line, nameEnd); i >= len(line) || line[i] != ':' {
			return unexpected(line, i)
		}
		start := skipWS(line, i+1)
		if i, _, _, err = d.scanValue(line, start, 1); err != nil {
			return err
		}
		fn(name, start, i)
		i = skipWS(line, i)
		if i < len(line) && line[i] == '}' {
			return trailing(line, i+1)
		}
		if i >= len(line) || line[i] != ',' {
			return unexpected(line, i)
		}
		i = skipWS(line, i+1)
	}
}
