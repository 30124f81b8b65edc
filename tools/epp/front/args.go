package front

import (
	"fmt"
	"strconv"
	"strings"
)

// Settings is where the front listens and where the picker behind it does.
type Settings struct {
	Port       int  // the picker's public gRPC port (--grpc-port), which the front takes
	PickerPort int  // the picker's own, on the loopback interface
	Secure     bool // TLS on the public port, as the picker's --secure-serving says (default on)
}

// Args splits the picker's command line: without Flag it is returned as is (nil settings). With it, the front
// takes --grpc-port (9002 unless given) and the secure-serving choice, and the picker gets PortFlag's port
// (DefaultPickerPort unless given) without TLS, since only the front in the same pod calls it.
func Args(args []string) ([]string, *Settings, error) {
	values, rest, err := take(args, map[string]bool{Flag: true, PortFlag: false, "--grpc-port": false, "--secure-serving": true})
	if err != nil {
		return nil, nil, err
	}
	if on, set := values[Flag]; !set || on == "false" {
		return args, nil, nil
	}
	settings := &Settings{Port: 9002, PickerPort: DefaultPickerPort, Secure: true}
	for flag, target := range map[string]*int{"--grpc-port": &settings.Port, PortFlag: &settings.PickerPort} {
		if value, set := values[flag]; set {
			if *target, err = strconv.Atoi(value); err != nil {
				return nil, nil, fmt.Errorf("%s %q: %w", flag, value, err)
			}
		}
	}
	if value, set := values["--secure-serving"]; set {
		settings.Secure = value != "false"
	}
	if settings.Port == settings.PickerPort {
		return nil, nil, fmt.Errorf("%s must differ from --grpc-port (%d)", PortFlag, settings.Port)
	}
	rest = append(rest, "--grpc-port", strconv.Itoa(settings.PickerPort), "--secure-serving=false")
	return rest, settings, nil
}

// take removes the named flags (boolean ones take no separate value) and returns their values.
func take(args []string, names map[string]bool) (map[string]string, []string, error) {
	values := map[string]string{}
	var rest []string
	for i := 0; i < len(args); i++ {
		name, value, inline := strings.Cut(args[i], "=")
		boolean, known := names[name]
		switch {
		case !known:
			rest = append(rest, args[i])
		case inline:
			values[name] = value
		case boolean:
			values[name] = "true"
		case i+1 < len(args):
			values[name] = args[i+1]
			i++
		default:
			return nil, nil, fmt.Errorf("%s needs a value", name)
		}
	}
	return values, rest, nil
}
