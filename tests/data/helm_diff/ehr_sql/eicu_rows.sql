-- Invented rows for the differential's tiny eicu.sqlite (no real patient): the harness runs eicu.sql, then this.
INSERT INTO patient VALUES ('900-00001', 1001, 'female', '54', '2104-03-02 08:00:00', 'alive');
INSERT INTO patient VALUES ('900-00002', 1002, 'male', '71', '2104-05-11 13:30:00', 'alive');
INSERT INTO patient VALUES ('900-00003', 1003, 'female', '38', '2105-01-20 22:15:00', 'expired');
INSERT INTO patient VALUES ('900-00004', 1004, 'male', '> 89', '2105-07-04 06:45:00', 'alive');
INSERT INTO lab VALUES (1, 1001, 'glucose', 112.5, '2104-03-02 09:00:00');
INSERT INTO lab VALUES (2, 1001, 'glucose', 98.25, '2104-03-03 09:00:00');
INSERT INTO lab VALUES (3, 1002, 'potassium', 4.1, '2104-05-11 14:00:00');
INSERT INTO lab VALUES (4, 1003, 'glucose', 143.0, '2105-01-21 05:00:00');
INSERT INTO medication VALUES (1, 1001, 'invented-statin 20 mg tab', 'po', '2104-03-02 10:00:00');
INSERT INTO medication VALUES (2, 1001, 'invented-statin 20 mg tab', 'po', '2104-03-03 10:00:00');
INSERT INTO medication VALUES (3, 1001, 'madeupamide 5 mg', 'iv', '2104-03-02 12:00:00');
INSERT INTO medication VALUES (4, 1002, 'madeupamide 5 mg', 'iv', '2104-05-12 08:00:00');
