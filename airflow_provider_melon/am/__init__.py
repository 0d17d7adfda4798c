"""The MeLoN ApplicationMaster jar ships here (built by appmaster/build.sh; not in git)."""
