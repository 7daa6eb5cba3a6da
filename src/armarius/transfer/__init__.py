"""Moving knowledge in and out: imports from other memory servers, exports of a workspace.

Every import is read and checked whole before anything is written (a bad line or file names
itself and nothing is written), then written in one transaction: all of it or none of it. An
import never curates (curation is a human's act on what they read) and a re-run changes nothing.
"""
