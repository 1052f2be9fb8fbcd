"""Commands of this stage are added by its issue; nothing registered yet."""
