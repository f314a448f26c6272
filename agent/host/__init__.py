"""The imperative shell: every effect on the machine goes through here."""
