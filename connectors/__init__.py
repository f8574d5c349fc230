"""splitsource connectors, one subpackage each. They use only the public ``splitsource`` API."""
